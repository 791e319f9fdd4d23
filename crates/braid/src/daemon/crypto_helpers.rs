//! Helper threads that seal or open parts of one large batch next to the
//! thread that owns it, so one direction of a tunnel can use more cores
//! than its one data-plane thread.
//!
//! Order per peer still holds: a batch is split, every part is done, and
//! only then does its owner send or write it, whole, under the lock of its
//! direction. On two cores there are no helpers by default: both cores are
//! busy with the two data-plane threads, the peer and the applications,
//! and waking a helper for every batch cost more than it gave (one forced
//! on: 2.87 and 3.03 against 3.44 and 3.70 Gbit/s for one stream).

use braid_core::batch::PacketBatch;
use braid_core::device::{CryptoJobs, CryptoPart};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Most helpers per direction.
pub const MAX_HELPERS: usize = 7;

/// A helper is woken only for at least this many packets; fewer are done
/// faster than a wake-up.
const MIN_JOBS_PER_PART: usize = 8;

/// Sets the number of helpers per direction, overriding the default of
/// one per core beyond two, split between the two directions.
pub const HELPERS_ENV: &str = "BRAID_CRYPTO_HELPERS";

/// How many helpers each direction gets: `BRAID_CRYPTO_HELPERS` if set,
/// else half the cores beyond the two data-plane threads (rounded up).
pub fn helpers_per_direction() -> Result<usize, String> {
    if let Ok(v) = std::env::var(HELPERS_ENV) {
        return match v.trim().parse::<usize>() {
            Ok(n) if n <= MAX_HELPERS => Ok(n),
            _ => Err(format!(
                "{HELPERS_ENV}={v:?}: expected a number of helper threads from 0 to {MAX_HELPERS}"
            )),
        };
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(cores.saturating_sub(2).div_ceil(2).min(MAX_HELPERS))
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
}

#[derive(Default)]
struct State {
    /// Per helper: the part it is to do next.
    tasks: [Option<Task>; MAX_HELPERS],
    running: usize,
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
    ) -> std::io::Result<CryptoHelpers> {
        let pool = Arc::new(Pool {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let mut helpers = CryptoHelpers {
            pool: pool.clone(),
            threads: Vec::new(),
            parts_handed_out,
        };
        for slot in 0..n.min(MAX_HELPERS) {
            let pool = pool.clone();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{slot}"))
                .spawn(move || pool.serve(slot))?;
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
        {
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
                state.running += 1;
                self.parts_handed_out.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.pool.work.notify_all();
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
        let state = self.0.lock();
        let _idle = self
            .0
            .done
            .wait_while(state, |s| s.running > 0)
            .unwrap_or_else(|e| e.into_inner());
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
        loop {
            let task = {
                let mut state = self.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    if let Some(task) = state.tasks[slot].take() {
                        break task;
                    }
                    state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            let Task { part, open } = task;
            let finished = panic::catch_unwind(AssertUnwindSafe(|| {
                if open {
                    part.open();
                } else {
                    part.seal();
                }
            }))
            .is_ok();
            let mut state = self.lock();
            state.panicked |= !finished;
            state.running -= 1;
            if state.running == 0 {
                self.done.notify_all();
            }
        }
    }
}
