//! braid's protocol core, sans-IO: it owns no socket and reads no clock.
//! Every input carries `now`; `poll_timeout()` says when to call next.

pub mod batch;
