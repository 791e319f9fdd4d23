//! Helper threads that seal or open parts of one large batch next to the
//! thread that owns it, so one direction of a tunnel can use more cores
//! than its one data-plane thread.
//!
//! Order per peer still holds: a batch is split, every part is done, and
//! only then does its owner send or write it, whole, under the lock of its
//! direction.
//!
//! Helpers and owner spin briefly before they sleep ([`SPIN`]): a wake-up
//! costs as much as sealing a batch here. With a free core, one helper
//! seals a batch of 64 × 1420 bytes 1.7× (ChaCha20-Poly1305) and 1.8×
//! (AES-256-GCM) as fast as the owner alone (`cargo bench -p braid --bench
//! crypto_helpers`); without the spinning it was slower than alone. On two
//! cores there are no helpers by default: both cores are busy with the two
//! data-plane threads, the peer and the applications, and a helper forced
//! on there halves the tunnel's speed.

use braid_core::batch::PacketBatch;
use braid_core::device::{CryptoJobs, CryptoPart};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most helpers per direction.
pub const MAX_HELPERS: usize = 7;

/// A helper is woken only for at least this many packets; fewer are done
/// faster than a wake-up.
const MIN_JOBS_PER_PART: usize = 8;

/// How long a helper that finished a task looks for the next one before it
/// sleeps, and how long the owner waits for its helpers before it sleeps.
/// Waking a sleeping thread costs tens of microseconds on a virtual
/// machine, as much as sealing a whole batch; under bulk traffic the next
/// batch comes within this.
const SPIN: Duration = Duration::from_micros(100);

/// Sets the number of helpers per direction, overriding the default of
/// one per core beyond two, split between the two directions.
pub const HELPERS_ENV: &str = "BRAID_CRYPTO_HELPERS";

/// How many helpers each direction gets: `BRAID_CRYPTO_HELPERS` if set,
/// else half the cores beyond the two data-plane threads (rounded up).
pub fn helpers_per_direction() -> Result<usize, String> {
    if let Ok(v) = std::env::var(HELPERS_ENV) {
        return parse_helpers(&v);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(cores.saturating_sub(2).div_ceil(2).min(MAX_HELPERS))
}

/// The value of [`HELPERS_ENV`]: a number too large for usize is refused
/// like any other above [`MAX_HELPERS`].
fn parse_helpers(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n <= MAX_HELPERS => Ok(n),
        _ => Err(format!(
            "{HELPERS_ENV}={v:?}: expected a number of helper threads from 0 to {MAX_HELPERS}"
        )),
    }
}

/// The helpers of one direction; none means the owner does all the work.
pub struct CryptoHelpers {
    pool: Arc<Pool>,
    threads: Vec<JoinHandle<()>>,
    /// Counts the parts handed to helpers (shown by `braid show`).
    parts_handed_out: Arc<AtomicU64>,
}

struct Pool {
    state: Mutex<State>,
    /// A helper has a task, or the helpers are to stop.
    work: Condvar,
    /// The last running task finished.
    done: Condvar,
    /// Changes whenever tasks are handed out or the helpers are to stop:
    /// what a spinning helper watches, without the lock.
    posted: AtomicU64,
    /// Tasks handed out and not finished: what a spinning owner watches.
    running: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Per helper: the part it is to do next.
    tasks: [Option<Task>; MAX_HELPERS],
    /// Helpers waiting on `work`: only then does handing out wake them.
    helpers_asleep: usize,
    /// The owner waits on `done`: only then does the last task wake it.
    owner_asleep: bool,
    panicked: bool,
    stop: bool,
}

struct Task {
    /// Borrowed from the owner's batch for as long as the owner waits in
    /// [`CryptoHelpers::run`], which ends only after the task has.
    part: CryptoPart<'static>,
    open: bool,
}

impl CryptoHelpers {
    /// Starts `n` helper threads named after `name`; every part handed to
    /// one is counted in `parts_handed_out`.
    pub fn new(
        n: usize,
        name: &str,
        parts_handed_out: Arc<AtomicU64>,
        realtime: Option<&super::realtime::Realtime>,
    ) -> std::io::Result<CryptoHelpers> {
        let pool = Arc::new(Pool {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            posted: AtomicU64::new(0),
            running: AtomicUsize::new(0),
        });
        let mut helpers = CryptoHelpers {
            pool: pool.clone(),
            threads: Vec::new(),
            parts_handed_out,
        };
        for slot in 0..n.min(MAX_HELPERS) {
            let pool = pool.clone();
            let thread_name = format!("{name}-{slot}");
            let realtime = realtime.cloned();
            let thread = std::thread::Builder::new()
                .name(thread_name.clone())
                .spawn(move || {
                    if let Some(r) = realtime {
                        r.join(&thread_name);
                    }
                    pool.serve(slot)
                })?;
            helpers.threads.push(thread);
        }
        Ok(helpers)
    }

    pub fn seal(&self, jobs: &mut CryptoJobs, batch: &mut PacketBatch) {
        self.run(jobs, batch, false);
    }

    pub fn open(&self, jobs: &mut CryptoJobs, batch: &mut PacketBatch) {
        self.run(jobs, batch, true);
    }

    fn run(&self, jobs: &mut CryptoJobs, batch: &mut PacketBatch, open: bool) {
        let parts = (self.threads.len() + 1).min(jobs.len() / MIN_JOBS_PER_PART);
        if parts <= 1 {
            if open {
                jobs.open(batch);
            } else {
                jobs.seal(batch);
            }
            return;
        }
        let mut split = jobs.split(batch, parts);
        let own = split.next();
        // Split first: nothing below may fail between handing out a task
        // and waking the helpers.
        let mut others: [Option<CryptoPart<'_>>; MAX_HELPERS] = Default::default();
        for (slot, part) in others.iter_mut().zip(split) {
            *slot = Some(part);
        }
        let waiting = WaitForHelpers(&self.pool);
        let wake = {
            let mut state = self.pool.lock();
            for (slot, part) in others.into_iter().enumerate() {
                let Some(part) = part else { break };
                // SAFETY: the part borrows `jobs` and `batch`, which this
                // function holds until `waiting` is dropped; its drop (also
                // when unwinding) returns only once every task handed out
                // here has finished, so no helper touches them later.
                let part =
                    unsafe { std::mem::transmute::<CryptoPart<'_>, CryptoPart<'static>>(part) };
                state.tasks[slot] = Some(Task { part, open });
                // At most MAX_HELPERS running at once.
                self.pool.running.fetch_add(1, Ordering::Relaxed);
                // Shown by `braid show`; fetch_add wraps, but one per part
                // of a batch a u64 does not within centuries.
                self.parts_handed_out.fetch_add(1, Ordering::Relaxed);
            }
            // Only ever compared for a change, so wrapping would be
            // harmless as well.
            self.pool.posted.fetch_add(1, Ordering::Release);
            state.helpers_asleep > 0
        };
        if wake {
            self.pool.work.notify_all();
        }
        if let Some(own) = own {
            if open {
                own.open();
            } else {
                own.seal();
            }
        }
        drop(waiting);
        let mut state = self.pool.lock();
        if std::mem::take(&mut state.panicked) {
            drop(state);
            panic!("a crypto helper thread panicked");
        }
    }
}

impl Drop for CryptoHelpers {
    fn drop(&mut self) {
        self.pool.lock().stop = true;
        self.pool.posted.fetch_add(1, Ordering::Release);
        self.pool.work.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Waits, when dropped, until no helper is running a task.
struct WaitForHelpers<'a>(&'a Pool);

impl Drop for WaitForHelpers<'_> {
    fn drop(&mut self) {
        let pool = self.0;
        let start = Instant::now();
        while pool.running.load(Ordering::Acquire) > 0 {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let mut state = pool.lock();
            state.owner_asleep = true;
            state = pool
                .done
                .wait_while(state, |_| pool.running.load(Ordering::Acquire) > 0)
                .unwrap_or_else(|e| e.into_inner());
            state.owner_asleep = false;
            break;
        }
    }
}

impl Pool {
    /// Locks the state; a poisoned lock is still consistent (every change
    /// to it is a single assignment), so it is taken over.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A helper thread: does the tasks put in its slot until told to stop.
    fn serve(&self, slot: usize) {
        let mut seen = self.posted.load(Ordering::Acquire);
        loop {
            let start = Instant::now();
            while self.posted.load(Ordering::Acquire) == seen && start.elapsed() < SPIN {
                std::hint::spin_loop();
            }
            let task = {
                let mut state = self.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    if let Some(task) = state.tasks[slot].take() {
                        break Some(task);
                    }
                    // Tasks for the others only: look out for the next.
                    let posted = self.posted.load(Ordering::Acquire);
                    if posted != seen {
                        seen = posted;
                        break None;
                    }
                    state.helpers_asleep += 1;
                    state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
                    state.helpers_asleep -= 1;
                }
            };
            let Some(Task { part, open }) = task else {
                continue;
            };
            // The owner hands out again only after this task is done.
            seen = self.posted.load(Ordering::Acquire);
            let finished = panic::catch_unwind(AssertUnwindSafe(|| {
                if open {
                    part.open();
                } else {
                    part.seal();
                }
            }))
            .is_ok();
            if !finished {
                self.lock().panicked = true;
            }
            if self.running.fetch_sub(1, Ordering::AcqRel) == 1 && self.lock().owner_asleep {
                self.done.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::cipher::{write_data_header, DataCipher, DataKeys};
    use braid_core::messages::DATA_HEADER_LEN;
    use std::net::SocketAddr;

    const TEXT: usize = 200;

    fn plaintext(i: usize) -> [u8; TEXT] {
        std::array::from_fn(|k| (i * 31 + k) as u8)
    }

    /// `n` data messages ready to seal, and the jobs for `keys`.
    fn batch(n: usize, cipher: DataCipher, keys: &Arc<DataKeys>) -> (PacketBatch, CryptoJobs) {
        let mut batch = PacketBatch::new(64, 512);
        let mut jobs = CryptoJobs::new();
        let addr: SocketAddr = "198.18.0.2:51820".parse().unwrap();
        for i in 0..n {
            batch.push_with(0, addr, |buf| {
                buf[DATA_HEADER_LEN..DATA_HEADER_LEN + TEXT].copy_from_slice(&plaintext(i));
                write_data_header(buf, cipher, 1, i as u64, TEXT, TEXT)
            });
            jobs.push(i, 0, keys);
        }
        (batch, jobs)
    }

    #[test]
    fn helper_counts_out_of_range_are_refused() {
        assert_eq!(parse_helpers("0"), Ok(0));
        assert_eq!(parse_helpers(" 7 "), Ok(MAX_HELPERS));
        for bad in [
            "8",
            "-1",
            "18446744073709551616",
            "99999999999999999999999",
            "",
            "two",
        ] {
            let e = parse_helpers(bad).unwrap_err();
            assert!(
                e.contains(HELPERS_ENV) && e.contains("from 0 to 7"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn helpers_seal_and_open_as_the_owner_alone_does() {
        let sending = Arc::new(DataKeys::new(
            &[1; 32],
            &[2; 32],
            Some(braid_core::cipher::AesLibrary::Ring),
        ));
        let receiving = Arc::new(DataKeys::new(
            &[2; 32],
            &[1; 32],
            Some(braid_core::cipher::AesLibrary::Ring),
        ));
        let parts = Arc::new(AtomicU64::new(0));
        let alone = CryptoHelpers::new(0, "test-alone", Arc::new(AtomicU64::new(0)), None).unwrap();
        let helped = CryptoHelpers::new(3, "test-helped", parts.clone(), None).unwrap();
        for round in 0..60 {
            let n = 1 + round % 64;
            let cipher = if round % 2 == 0 {
                DataCipher::ChaCha20Poly1305
            } else {
                DataCipher::Aes256Gcm
            };
            let (mut expected, mut expected_jobs) = batch(n, cipher, &sending);
            alone.seal(&mut expected_jobs, &mut expected);
            let (mut sealed, mut jobs) = batch(n, cipher, &sending);
            helped.seal(&mut jobs, &mut sealed);
            for i in 0..n {
                assert_eq!(
                    sealed.packet(i),
                    expected.packet(i),
                    "round {round}, slot {i}"
                );
            }

            let mut opening = CryptoJobs::new();
            for i in 0..n {
                opening.push(i, 0, &receiving);
            }
            helped.open(&mut opening, &mut sealed);
            for i in 0..n {
                let text = &sealed.packet(i)[DATA_HEADER_LEN..DATA_HEADER_LEN + TEXT];
                assert_eq!(text, plaintext(i), "round {round}, slot {i} did not open");
            }
            // Now and then long enough for the helpers to fall asleep.
            if round % 7 == 0 {
                std::thread::sleep(SPIN * 3);
            }
        }
        // Whether a helper wakes before the owner has sealed every part is
        // up to the scheduler: on a loaded machine keep handing out large
        // batches (for at most 20 s) rather than judge one round's luck.
        let deadline = Instant::now() + Duration::from_secs(20);
        while parts.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            let (mut sealed, mut jobs) = batch(64, DataCipher::ChaCha20Poly1305, &sending);
            helped.seal(&mut jobs, &mut sealed);
        }
        assert!(
            parts.load(Ordering::Relaxed) > 0,
            "the helpers never took part in 20 s of large batches"
        );
    }
}
