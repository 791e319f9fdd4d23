//! braid's protocol core, sans-IO: it owns no socket and reads no clock.
//! Every input carries `now`; `poll_timeout()` says when to call next.

pub mod allowed_ips;
pub mod batch;
pub mod cipher;
pub mod compress;
pub mod consts;
pub mod cookie;
pub mod crypto;
pub mod deadlines;
pub mod device;
pub mod ext;
pub mod fec;
pub mod fragment;
pub mod icmp;
pub mod ip;
pub mod messages;
pub mod mss;
pub mod noise;
pub mod path;
pub mod peer;
pub mod pmtud;
pub mod ratelimiter;
pub mod reorder;
pub mod repair;
pub mod replay;
pub mod session;
pub mod shaper;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timers;

#[cfg(test)]
mod test_time;
