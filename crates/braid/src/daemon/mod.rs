//! The braid daemon: one interface, two data-plane threads.
//!
//! ```text
//!   outbound thread: TUN ──read_batch──► encapsulate ──send_batch──► UDP
//!                    (while sending is bulk; else the main thread does it)
//!   main thread:     UDP ──recv_batch──► decapsulate ──write_batch─► TUN
//!                    timers, handshakes, keepalives ─► UDP
//!   UAPI socket thread ──channel + eventfd──► main thread applies, answers
//! ```
//!
//! The device sits behind one lock that is taken per batch, never per
//! packet, and never across encryption or a system call (see `dataplane`);
//! every I/O call moves a batch.

pub mod batch;
mod ceilings;
mod clocks;
pub mod control;
pub mod crypto_helpers;
pub mod dataplane;
mod events;
pub mod guardian;
pub mod hooks;
pub mod iface;
pub mod line;
pub mod lines;
mod os_random;
mod pmtu;
pub mod privilege;
pub mod realtime;
mod reload;
pub mod requests;
pub mod routes;
pub mod spin;
pub mod tcp_lines;
mod turn_order;

use crate::background::{self, ReadyPipe};
use crate::config::{Config, MssFix, Transport};
use crate::uapi::{socket_path, Errno, PeerUpdate, Request, Response, SetRequest};
use batch::{data_plane_batch, stride_for, BATCH};
use braid_core::batch::PacketBatch;
use braid_core::device::Device;
use braid_io::{netcfg, poll, Interest, Tun, UdpSocket, Waker};
use control::{InterfaceState, Pending};
use dataplane::Shared;
use hooks::run_hooks;
use std::os::fd::AsRawFd;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Received batches one readable line gets before timers, requests and
/// the other lines have their turn (each batch spends at most
/// `MAX_HANDSHAKES_PER_BATCH` on handshakes).
const RECV_BATCHES_PER_WAKE: usize = 8;

/// How often housekeeping (MTU changed? moved?) runs. A deleted interface
/// is noticed at once, by the TUN's reads failing.
const HOUSEKEEPING: Duration = Duration::from_secs(1);
/// How often the TUN MTU and the too-big limit are brought in line with
/// the paths' discovery: often enough to follow a black hole at once, rare
/// enough that a busy receive loop does not scan every peer per batch.
const PATH_MTU_FOLLOW: Duration = Duration::from_millis(100);

/// What to bring up.
pub struct UpRequest {
    pub name: String,
    /// `None`: an empty interface configured later over the UAPI (wg-quick's
    /// userspace mode).
    pub config: Option<Config>,
    /// Whether the daemon gives up root once set up.
    pub privileges: privilege::Privileges,
    /// The most verbose level logged (`LogLevel =`, raised by `-v`).
    pub log_level: crate::log::Level,
}

/// Turns a parsed config into the same `set` request the UAPI would send,
/// so both paths configure the device identically.
pub fn config_to_set(config: &Config) -> std::io::Result<SetRequest> {
    let mut set = SetRequest {
        private_key: Some(Some(config.interface.private_key.clone())),
        listen_port: config.interface.listen_port,
        fwmark: config.interface.fwmark,
        replace_peers: true,
        peers: Vec::new(),
    };
    for peer in &config.peers {
        let mut u = PeerUpdate::new(peer.public_key);
        u.preshared_key = Some(peer.preshared_key.clone());
        // A TCP endpoint is a path on its TCP line (`tcp_lines`), not UDP's.
        if let Some(ep) = peer
            .endpoint
            .as_ref()
            .filter(|_| peer.transport == Transport::Udp)
        {
            let addr = ep.resolve().map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot resolve endpoint {}:{}: {e}", ep.host, ep.port),
                )
            })?;
            u.endpoint = Some(addr);
        }
        u.replace_allowed_ips = true;
        u.allowed_ips = peer.allowed_ips.clone();
        u.persistent_keepalive_interval = peer.persistent_keepalive;
        set.peers.push(u);
    }
    Ok(set)
}

/// Creates the interface, configures it and runs the event loop until a
/// stop signal or the interface's removal. `ready` learns the outcome of
/// the set-up.
pub fn run(req: UpRequest, mut ready: ReadyPipe) -> std::io::Result<()> {
    let name = req.name.clone();
    crate::log::set_level(req.log_level);
    crate::log::detect_output();
    let (mut daemon, path) = match setup(&req) {
        Ok(v) => v,
        Err(e) => {
            ready.failed(&format!("{name}: {e}\n"));
            return Err(e);
        }
    };
    // The device holds the private key now: the config's copy goes
    // (zeroized as it is dropped) and only the down hooks are kept.
    let (pre_down, post_down) = req
        .config
        .map(|c| (c.interface.pre_down, c.interface.post_down))
        .unwrap_or_default();
    ready.ready(&format!(
        "braid: interface {name} is up (listening on UDP port {})\n",
        daemon.state.listen_port
    ));
    daemon.notifier = ready.take_notifier();
    crate::info!(
        name,
        "up, listening on UDP port {}",
        daemon.state.listen_port
    );
    if let Some(r) = &daemon.shared.realtime {
        crate::info!(
            name,
            "data plane in the real-time class (SCHED_RR, priority {})",
            r.priority
        );
    }
    if daemon.shared.tun.queue_count() > 1 {
        crate::info!(
            name,
            "{} TUN queues, a thread each",
            daemon.shared.tun.queue_count()
        );
    }
    if daemon.shared.crypto_helpers > 0 {
        crate::info!(
            name,
            "{} crypto helper thread(s) per direction",
            daemon.shared.crypto_helpers
        );
    }
    let result = daemon.event_loop();
    if let Some(n) = &daemon.notifier {
        let _ = n.stopping();
    }
    if let Some(guardian) = daemon.guardian.as_mut() {
        if let Err(e) = guardian.pre_down() {
            crate::error!(name, "PreDown through the privilege guardian: {e}");
        }
    } else if let Err(e) = run_hooks(&name, &pre_down) {
        crate::error!(name, "{e}");
    }
    let _ = std::fs::remove_file(&path);
    if background::stop_requested() || !daemon.routes.fails_closed() {
        if let Err(e) = daemon.routes.remove() {
            crate::error!(name, "removing routing rules: {e}");
        }
    } else {
        crate::warn!(
            name,
            "stopped without a stop request: the full tunnel stays closed (its rules and \
             unreachable routes stay, FailClosed); `braid up` again or `braid down {name}.conf` \
             removes them"
        );
    }
    // Closing the TUN removes the interface and its routes; a guardian then
    // runs PostDown and removes the socket.
    let guarded = daemon.guardian.is_some();
    drop(daemon);
    if !guarded {
        if let Err(e) = run_hooks(&name, &post_down) {
            crate::error!(name, "{e}");
        }
    }
    crate::info!(name, "down");
    result
}

fn setup(req: &UpRequest) -> std::io::Result<(Daemon, std::path::PathBuf)> {
    let name = &req.name;
    if netcfg::link_exists(name) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("interface {name} already exists"),
        ));
    }
    let set = req.config.as_ref().map(config_to_set).transpose()?;
    let crypto_helpers = crypto_helpers::helpers_per_direction()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let realtime = req
        .config
        .as_ref()
        .and_then(|c| c.interface.realtime_priority)
        .map(|priority| realtime::Realtime {
            interface: name.clone(),
            priority,
        });
    // Before anything changes, and while the privileges to raise
    // RLIMIT_RTPRIO are still there.
    let keep_sys_nice = match &realtime {
        Some(r) => realtime::enter_at_start(r.priority)?,
        None => false,
    };
    let drop_to = match &req.privileges {
        privilege::Privileges::DropTo(user) => Some((user, privilege::lookup_user(user)?)),
        privilege::Privileges::Keep => None,
    };
    let full_tunnel_mark = req.config.as_ref().and_then(routes::full_tunnel_mark);
    if let Some(cfg) = &req.config {
        routes::check_table_free(cfg, full_tunnel_mark)?;
    }
    // Bound before anything changes, so a port in use stops `braid up`
    // with nothing to undo.
    let metrics_listener = req
        .config
        .as_ref()
        .and_then(|c| c.interface.metrics_listen)
        .map(crate::metrics::bind)
        .transpose()?;
    if let Some(cfg) = &req.config {
        run_hooks(name, &cfg.interface.pre_up)?;
    }
    let queues = req.config.as_ref().map_or(1, |c| c.interface.queues);
    let tun = Tun::create_queues(name, braid_io::Offload::Auto, queues).map_err(|e| {
        if queues > 1 {
            std::io::Error::new(e.kind(), format!("Queues = {queues}: {e}"))
        } else {
            e
        }
    })?;
    let mtu = req
        .config
        .as_ref()
        .and_then(|c| c.interface.mtu)
        .unwrap_or(1420);
    netcfg::link_set_mtu(name, mtu)?;
    let waker = Arc::new(Waker::new()?);
    background::install_stop_signals(waker.as_raw_fd());
    let now = Instant::now();
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut device = Device::new(now, SystemTime::now(), seed);
    device.set_random_source(Box::new(os_random::OsRandom));
    device.set_mtu(mtu as usize);
    device.set_aes_library(crate::aes_choice::choice().library);
    crate::debug!(name, "{}", crate::aes_choice::text());
    // Test only (tests/e2e/faults.rs): many rekeys within a short transfer.
    if let Some(secs) = std::env::var("BRAID_TEST_REKEY_AFTER_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        crate::warn!(name, "test knob: rekeying every {secs} s");
        device.set_rekey_after_time_for_tests(Duration::from_secs(secs));
    }
    if let Some(cfg) = &req.config {
        device.set_cipher(cfg.interface.cipher);
        device.set_compression(cfg.interface.compression);
    }
    let mut state = InterfaceState {
        listen_port: 0,
        fwmark: 0,
    };
    if let Some(set) = &set {
        let effects = requests::apply_set(&mut device, set, now)
            .map_err(|e| std::io::Error::from_raw_os_error(e.0))?;
        state.listen_port = effects.new_listen_port.unwrap_or(0);
        state.fwmark = effects.new_fwmark.unwrap_or(0);
    }
    if let Some(mark) = full_tunnel_mark {
        state.fwmark = mark;
    }
    // One socket per TUN queue, so each queue's thread receives too.
    let group = UdpSocket::bind_group(state.listen_port, main_group_size(name, queues))?;
    state.listen_port = group[0].local_port();
    if state.fwmark != 0 {
        set_fwmark(&group, state.fwmark)?;
    }
    let mut lines = lines::Lines::new(group);
    if let Some(cfg) = &req.config {
        tcp_lines::open(&mut lines, cfg, state.listen_port, state.fwmark)?;
        apply_multipath(&mut device, &mut lines, cfg)?;
    }
    let mut guardian = match drop_to {
        Some(_) => Some(guardian::Guardian::start(guardian::Duties {
            name: name.clone(),
            socket: socket_path(name),
            pre_down: req
                .config
                .as_ref()
                .map_or(Vec::new(), |c| c.interface.pre_down.clone()),
            post_down: req
                .config
                .as_ref()
                .map_or(Vec::new(), |c| c.interface.post_down.clone()),
        })?),
        None => None,
    };
    let (control_socket, path) = control::listen(name)?;
    if let Some(g) = guardian.as_mut() {
        g.socket_created()?;
    }
    let mut installed = routes::Installed::default();
    if let Some(cfg) = &req.config {
        for addr in &cfg.interface.addresses {
            netcfg::addr_add(name, &addr.to_string())?;
        }
        netcfg::link_set_up(name)?;
        installed = routes::install(name, cfg, full_tunnel_mark)?;
        if let Err(e) = run_hooks(name, &cfg.interface.post_up) {
            let _ = installed.remove();
            return Err(e);
        }
    }
    if let (Some((user, target)), Some(g)) = (drop_to, guardian.as_mut()) {
        privilege::drop_to(target, keep_sys_nice)?;
        g.up()?;
        let kept = match privilege::kept_names(keep_sys_nice).split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => "no capability".to_string(),
        };
        crate::info!(name, "running as user {user}, keeping {kept}");
    }
    // Every thread starts from here on, after the drop: each inherits the
    // reduced capabilities, bounding set and no-new-privs of this one.
    let (requester, requests) = control::request_channel(waker.clone());
    if let Some(listener) = metrics_listener {
        crate::metrics::serve(name, listener, requester.clone())?;
    }
    control_socket.serve(requester)?;
    let mss_fix = req
        .config
        .as_ref()
        .map_or(MssFix::default(), |c| c.interface.mss_fix);
    let daemon = Daemon {
        name: name.clone(),
        shared: Arc::new(Shared::new(
            device,
            tun,
            lines,
            waker,
            // Without a config file (`braid NAME`) whoever drives the UAPI
            // (wg-quick) owns the MTU: it is never changed behind its back.
            pmtu::PathMtu::new(
                req.config.as_ref().map_or(Some(mtu), |c| c.interface.mtu),
                mtu,
                BATCH,
            ),
            dataplane::Settings {
                mtu,
                mss_fix,
                crypto_helpers,
                realtime,
            },
        )?),
        state,
        requests,
        control_batch: data_plane_batch(stride_for(mtu as usize)),
        handshake_jobs: braid_core::device::CryptoJobs::new(),
        routes: installed,
        guardian,
        events: events::EventWatch::default(),
        log_raise: req.log_level.steps_above(
            req.config
                .as_ref()
                .and_then(|c| c.interface.log_level)
                .unwrap_or(crate::log::Level::Info),
        ),
        running: req.config.as_ref().map(reload::Running::new),
        notifier: None,
    };
    Ok((daemon, path))
}

/// How many sockets the main line's group gets: one per TUN queue, but
/// only while braid runs as root. The kernel lets every process of the
/// user that opened a `SO_REUSEPORT` group join it and take a share of its
/// datagrams, so a group opened as `nobody` (a new `ListenPort` after the
/// privilege drop, or a daemon started without root) would be open to
/// that user's other processes; and any member may replace the group's
/// steering program, so a filter would not close that. One plain socket
/// can be joined by no one: queues 1.. then only read their TUN queue.
fn main_group_size(name: &str, queues: usize) -> usize {
    // SAFETY: geteuid has no preconditions.
    if queues <= 1 || unsafe { libc::geteuid() } == 0 {
        return queues.max(1);
    }
    crate::warn!(
        name,
        "Queues = {queues}: the UDP port gets one socket, not {queues}: braid runs \
         without root now, and other processes of this user could join a socket group \
         it opened; the main thread receives everything"
    );
    1
}

/// braid's per-peer settings that the userspace API does not carry: the
/// peer's options (mode, cipher, rate limit, compression, reorder window)
/// and extra paths (each on its line).
fn apply_multipath(
    device: &mut Device,
    lines: &mut lines::Lines,
    cfg: &Config,
) -> std::io::Result<()> {
    let line_ids = tcp_lines::open_for(lines, cfg)?;
    for (peer, path_lines) in cfg.peers.iter().zip(line_ids) {
        let Some(pid) = device.find_peer(peer.public_key.as_bytes()) else {
            continue;
        };
        device.set_peer_options(pid, &peer.options());
        tcp_lines::add_endpoint_path(device, lines, pid, peer)?;
        for (path, line) in peer.paths.iter().zip(path_lines) {
            let remote = path.endpoint.resolve().map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("path {}: cannot resolve {}: {e}", path.name, path.endpoint),
                )
            })?;
            device.add_path(pid, &path.name, line, remote);
        }
    }
    Ok(())
}

/// Sets `SO_MARK` on every socket of a group (the main line's).
fn set_fwmark<'a>(
    group: impl IntoIterator<Item = &'a UdpSocket>,
    mark: u32,
) -> std::io::Result<()> {
    for udp in group {
        // SAFETY: setsockopt with a valid fd and a u32 option value.
        let rc = unsafe {
            libc::setsockopt(
                udp.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&mark as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

struct Daemon {
    name: String,
    shared: Arc<Shared>,
    state: InterfaceState,
    requests: Receiver<Pending>,
    control_batch: PacketBatch,
    /// Queued initiations answered at a wake-up (see
    /// `dataplane::answer_queued_initiations`).
    handshake_jobs: braid_core::device::CryptoJobs,
    routes: routes::Installed,
    guardian: Option<guardian::Guardian>,
    events: events::EventWatch,
    /// How many levels `-v` raised the config's `LogLevel` by (a reload
    /// that changes `LogLevel` keeps them).
    log_raise: u8,
    /// The config it runs, for `braid syncconf` to compare a file with;
    /// `None` for an interface configured over the userspace API alone.
    running: Option<reload::Running>,
    /// The service manager, told about reloads and the stop.
    notifier: Option<crate::sd_notify::Notifier>,
}

impl Daemon {
    /// Runs the outbound thread and, on this thread, everything else until
    /// a stop signal, the interface's removal or an I/O failure.
    fn event_loop(&mut self) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let outbound = std::thread::Builder::new()
            .name("braid-outbound".into())
            .spawn(move || {
                if let Some(r) = &shared.realtime {
                    r.join("braid-outbound");
                }
                dataplane::run_outbound(shared)
            })?;
        let mut queues = Vec::new();
        for queue in 1..self.shared.tun.queue_count() {
            let shared = self.shared.clone();
            let thread = format!("braid-queue-{queue}");
            let spawned = std::thread::Builder::new()
                .name(thread.clone())
                .spawn(move || {
                    if let Some(r) = &shared.realtime {
                        r.join(&thread);
                    }
                    dataplane::run_queue(shared, queue)
                });
            match spawned {
                Ok(handle) => queues.push(handle),
                Err(e) => {
                    self.shared.request_stop();
                    let _ = outbound.join();
                    for handle in queues {
                        let _ = handle.join();
                    }
                    return Err(e);
                }
            }
        }
        let result = self.main_loop();
        self.shared.request_stop();
        let outbound = outbound
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("outbound thread panicked")));
        let mut result = result.and(outbound);
        for handle in queues {
            let queue = handle
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a TUN queue's thread panicked")));
            result = result.and(queue);
        }
        // A read or write on the TUN of a deleted interface fails
        // (EBADFD), wherever the interface was: that is its removal, a
        // stop like any other, not an I/O failure.
        if matches!(&result, Err(e) if braid_io::is_removed_error(e)) || self.shared.tun.removed() {
            crate::info!(self.name, "interface was removed");
            return Ok(());
        }
        result
    }

    fn main_loop(&mut self) -> std::io::Result<()> {
        let mut next_housekeeping = Instant::now() + HOUSEKEEPING;
        let mut next_mtu_follow = Instant::now();
        let mut suspend = clocks::SuspendDetector::now();
        let mut watch = iface::Watch::default();
        // A first look now, so a move right after start-up is noticed.
        let _ = watch.check(&self.shared.tun, &self.name);
        let mut spin = spin::Spin::new(Instant::now());
        let mut spin_for: Option<Duration> = None;
        while !background::stop_requested() && !self.shared.stopping() {
            let now = Instant::now();
            let deadline = self
                .shared
                .device()
                .poll_timeout()
                .map_or(next_housekeeping, |t| t.min(next_housekeeping));
            self.shared.set_main_deadline(deadline);
            let mut fds = [(0, Interest::READABLE); poll::MAX_FDS];
            fds[0] = (self.shared.waker.as_raw_fd(), Interest::READABLE);
            // Datagrams left in a socket's scratch by a coalesced receive
            // wake no poll: such a line counts as readable at once.
            let mut leftovers = [false; poll::MAX_FDS];
            // Every line: Lines refuses more than MAX_LINES.
            let n_lines = self.line_fds(lines::MAX_LINES, &mut fds[1..], &mut leftovers);
            let tun_index = 1 + n_lines;
            fds[tun_index] = (self.shared.tun.as_raw_fd(), Interest::READABLE);
            let watch_tun = self.shared.main_watches_tun();
            let fds = &fds[..tun_index + usize::from(watch_tun)];
            let wait = if leftovers.contains(&true) {
                Duration::ZERO
            } else {
                deadline.saturating_duration_since(now)
            };
            let ready = match spin_for.take() {
                Some(budget) if !wait.is_zero() => {
                    let (ready, spent) = spin::poll_then_wait(fds, budget, wait)?;
                    spin.spun(spent);
                    ready
                }
                _ => poll::wait(fds, Some(wait))?,
            };
            let woke = Instant::now();
            let sent_before = self.shared.tun_packets_sent();
            let written_before = self.shared.tun_packets_written();
            let mut received = 0;
            // Up to when every line's arrivals have been taken in: a line
            // the poll found empty, at the wake-up; a line read, where its
            // receive left off. The timers below run no further, so a
            // reorder gap is not given up while its packets wait in a
            // socket (this thread ran late: preempted, stopped, or behind
            // another real-time thread's slice).
            let mut complete_until = woke;
            for (line, &leftover) in leftovers.iter().enumerate().take(n_lines) {
                if leftover || ready.is_readable(1 + line) {
                    let (n, until) = self.on_udp_readable(line)?;
                    received += n;
                    complete_until = until.map_or(complete_until, |u| u.min(complete_until));
                }
            }
            if watch_tun && ready.is_readable(tun_index) {
                dataplane::send_from_tun_as_watcher(&self.shared)?;
            }
            let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            spin_for = spin.after_wake(
                woke,
                Instant::now(),
                spin::Wake {
                    received,
                    delivered: count(
                        self.shared
                            .tun_packets_written()
                            .wrapping_sub(written_before),
                    ),
                    sent: count(self.shared.tun_packets_sent().wrapping_sub(sent_before)),
                },
                self.shared.main_watches_tun(),
            );
            if ready.is_readable(0) {
                self.shared.waker.drain()?;
                self.serve_requests();
            }
            let now = Instant::now();
            // Time the monotonic clock missed (a suspend) ages sessions and
            // timers before they fire; the wall clock ran on too.
            if let Some(slept) = suspend.check(now) {
                crate::info!(self.name, "the system slept for {:.0?}", slept);
                let mut device = self.shared.device();
                device.time_passed_unseen(now, slept);
                let (at, wall) = clocks::wall_now();
                device.set_wall_clock(at, wall);
            }
            let mut until = complete_until.min(now);
            let due = self.shared.device().poll_timeout();
            if due.is_some_and(|t| t <= until) {
                until = until.min(self.lines_taken_in(n_lines)?);
                until = self.shared.members_taken_in(until)?;
            }
            {
                let mut device = self.shared.device();
                device.handle_timeout(until);
                // Initiations over a received batch's budget: another
                // budget of them at each wake-up (the poll does not wait
                // while some are queued).
                if device.queued_initiations() > 0 {
                    device.prepare_queued_initiations(now, &mut self.handshake_jobs);
                }
            }
            dataplane::answer_queued_initiations(&self.shared, now, &mut self.handshake_jobs);
            if now >= next_mtu_follow {
                next_mtu_follow = now + PATH_MTU_FOLLOW;
                self.shared.follow_path_mtu(&self.name);
                self.shared.refresh_path_ceilings(now);
                self.events.look(&mut self.shared.device(), &self.name);
            }
            self.write_released(now)?;
            dataplane::transmit_pending(&self.shared, now, &mut self.control_batch)?;
            if now >= next_housekeeping {
                next_housekeeping = now + HOUSEKEEPING;
                // NTP may have set or stepped the wall clock since.
                let (at, wall) = clocks::wall_now();
                self.shared.device().set_wall_clock(at, wall);
                // Asked through the TUN, in the namespace the interface is
                // in now: never by its name in the daemon's (it may have
                // moved, `ip link set NAME netns OTHER`).
                match watch.check(&self.shared.tun, &self.name) {
                    iface::Seen::Removed => break,
                    iface::Seen::There { mtu, moved } => {
                        if moved {
                            self.shared.path_mtu.retry_refused();
                        }
                        if mtu > 0 && mtu != self.shared.tunnel_mtu() {
                            self.shared.set_mtu(mtu);
                        }
                    }
                    iface::Seen::Unknown => {}
                }
                tcp_lines::sort_out_connections(&self.shared.lines(), &self.shared.device());
            }
        }
        Ok(())
    }

    /// Receives from `line` until it is drained (bounded, so timers and
    /// requests are not starved).
    /// Returns how many datagrams came in, and up to when every arrival
    /// was taken in (see `Scratch::complete_until`).
    fn on_udp_readable(&mut self, line: usize) -> std::io::Result<(usize, Option<Instant>)> {
        let mut receiver = self.shared.receiver();
        let n =
            dataplane::receive_from_line(&self.shared, &mut receiver, line, RECV_BATCHES_PER_WAKE)?;
        Ok((n, receiver.complete_until()))
    }

    /// Puts the poll fd of each line, at most `most`, into `fds` and
    /// whether a coalesced receive left datagrams in its scratch into
    /// `leftovers` (those wake no poll); returns how many lines.
    fn line_fds(
        &self,
        most: usize,
        fds: &mut [(std::os::fd::RawFd, Interest)],
        leftovers: &mut [bool],
    ) -> usize {
        let lines = self.shared.lines();
        let n = lines.all().len().min(most);
        for (i, socket) in lines.all().iter().take(n).enumerate() {
            fds[i] = (socket.poll_fd(), Interest::READABLE);
            leftovers[i] = socket.has_pending();
        }
        n
    }

    /// Up to when the main thread's lines have been taken in, looked at
    /// again after the timers' time was read: the poll's readiness is from
    /// before `woke`, and a thread stopped or preempted between the two
    /// would otherwise run the timers past datagrams that came meanwhile
    /// (a reorder gap given up with its filler in the socket). A line with
    /// datagrams is read now; a receive the outbound thread has under way
    /// is waited for (the receiver's lock), so its batch is in the device.
    fn lines_taken_in(&mut self, n_lines: usize) -> std::io::Result<Instant> {
        let checked = Instant::now();
        let mut fds = [(0, Interest::READABLE); poll::MAX_FDS];
        let mut leftovers = [false; poll::MAX_FDS];
        // A `ListenPort` change since the poll may have left fewer.
        let n_lines = self.line_fds(n_lines, &mut fds, &mut leftovers);
        let ready = poll::wait(&fds[..n_lines], Some(Duration::ZERO))?;
        let mut until = checked;
        let mut read_any = false;
        for (line, &leftover) in leftovers.iter().enumerate().take(n_lines) {
            if leftover || ready.is_readable(line) {
                read_any = true;
                let (_, taken) = self.on_udp_readable(line)?;
                until = taken.map_or(until, |t| t.min(until));
            }
        }
        if !read_any {
            drop(self.shared.receiver());
        }
        Ok(until)
    }

    /// Writes what the reorder windows released (after the batch it
    /// follows, so order holds).
    fn write_released(&mut self, now: Instant) -> std::io::Result<()> {
        let mut receiver = self.shared.receiver();
        dataplane::write_released(&self.shared, now, &mut receiver)
    }

    fn serve_requests(&mut self) {
        while let Ok(pending) = self.requests.try_recv() {
            let response = match pending.request {
                Request::Get => requests::get_part(&self.shared.device(), &self.state, None),
                Request::GetMore(from) => {
                    requests::get_part(&self.shared.device(), &self.state, Some(from))
                }
                Request::GetBraid => {
                    let mut snap = self.snapshot();
                    snap.private_key = None;
                    Response::Braid(snap)
                }
                Request::Set(set) => self.apply(&set),
                Request::SetBraid(config) => {
                    let (response, line) = self.serve_sync(&config);
                    if matches!(response, Response::Synced(Err(_))) {
                        crate::warn!(self.name, "{line}");
                    } else {
                        crate::info!(self.name, "{line}");
                    }
                    response
                }
            };
            let _ = pending.reply.send(response);
        }
    }

    fn snapshot(&self) -> crate::uapi::DeviceSnapshot {
        let all_sockets =
            |on: fn(&UdpSocket) -> bool| u64::from(self.shared.lines().udp_sockets().all(on));
        let io = [
            ("tun_dropped", self.shared.tun.dropped()),
            ("udp_dropped", self.shared.lines().dropped()),
            ("tun_offload", self.shared.tun.offload_enabled().into()),
            ("udp_gso", all_sockets(UdpSocket::gso_enabled)),
            ("udp_gro", all_sockets(UdpSocket::gro_enabled)),
            ("tunnel_mtu", self.shared.tunnel_mtu().into()),
            ("too_big_answered", self.shared.path_mtu.answer_counts().0),
            ("too_big_suppressed", self.shared.path_mtu.answer_counts().1),
            ("crypto_helpers", self.shared.crypto_helpers as u64),
            ("tun_queues", self.shared.tun.queue_count() as u64),
            ("tun_queue_packets", self.shared.extra_queues_packets_sent()),
            ("udp_sockets", self.shared.lines().main_group_len() as u64),
            (
                "udp_socket_datagrams",
                self.shared.extra_sockets_datagrams_received(),
            ),
            (
                "realtime_priority",
                self.shared
                    .realtime
                    .as_ref()
                    .map_or(0, |r| u64::from(r.priority)),
            ),
            (
                "crypto_helper_parts",
                self.shared
                    .helper_parts
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        ];
        let mut snap = control::snapshot(&self.shared.device(), &self.state, &io);
        snap.events = crate::log::recent();
        snap
    }

    /// Applies a `set`: whatever can fail (the peer limit, a new port, a
    /// firewall mark) is tried before the device changes, so a refused
    /// request changes nothing that runs.
    fn apply(&mut self, set: &SetRequest) -> Response {
        let now = Instant::now();
        if let Err(errno) = requests::check_peer_limit(&self.shared.device(), set) {
            crate::warn!(
                self.name,
                "refused a set: it would take the interface beyond {} peers",
                self.shared.device().peer_limit()
            );
            return Response::Error(errno);
        }
        let new_socket = match set.listen_port.filter(|&p| p != self.state.listen_port) {
            // Sized here, so only a new port says why it gets one socket.
            Some(port) => match UdpSocket::bind_group(
                port,
                main_group_size(&self.name, self.shared.tun.queue_count()),
            ) {
                Ok(udp) => Some(udp),
                Err(e) => {
                    crate::warn!(self.name, "cannot listen on UDP port {port}: {e}");
                    return Response::Error(Errno::EADDRINUSE);
                }
            },
            None => None,
        };
        let mark = set.fwmark.unwrap_or(self.state.fwmark);
        let marked = match &new_socket {
            Some(group) if mark != 0 => set_fwmark(group, mark),
            Some(_) => Ok(()),
            None if set.fwmark.is_some() => set_fwmark(self.shared.lines().main_group(), mark),
            None => Ok(()),
        };
        if marked.is_err() {
            return Response::Error(Errno::EINVAL);
        }
        if let Err(errno) = requests::apply_set(&mut self.shared.device(), set, now) {
            return Response::Error(errno);
        }
        if let Some(group) = new_socket {
            self.state.listen_port = group[0].local_port();
            self.shared.replace_main_line(group);
        }
        self.state.fwmark = mark;
        if let Err(e) = dataplane::transmit_pending(&self.shared, now, &mut self.control_batch) {
            crate::warn!(self.name, "send failed: {e}");
        }
        Response::Ok
    }
}
