//! Wake-ups for `logs` follows (`ax logs -f`): a follow that found no new
//! output waits for a notice about its attempt instead of reading again
//! on a timer. The executor's output reader sends one after each write to
//! the attempt's log, and its supervisor one more once the attempt's end
//! (`Exited`, `SpawnFailed`) is on its way to the scheduler, so a follow
//! reading after that notice sees the attempt as ended.
//!
//! With nobody following, a notice costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ax_engine::RunId;
use tokio::sync::Notify;

/// The attempts being followed, shared by the executor (which notifies) and
/// the socket server's follows (which wait).
#[derive(Clone, Debug, Default)]
pub struct LogWatch(Arc<Followed>);

#[derive(Debug, Default)]
struct Followed {
    /// Follows registered (`Following`s alive), all attempts together.
    count: AtomicUsize,
    attempts: Mutex<HashMap<(RunId, u32), Waiting>>,
}

/// An attempt's follows: how many, and what wakes them.
type Waiting = (usize, Arc<Notify>);

impl LogWatch {
    /// The attempt's log grew, or the attempt ended: its follows read
    /// again.
    pub fn notice(&self, run: RunId, attempt: u32) {
        // SeqCst: a follow registers before it reads the file, and this
        // load comes after the write, so either it sees the follow or the
        // follow's read sees the write.
        if self.0.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let attempts = self
            .0
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, wake)) = attempts.get(&(run, attempt)) {
            wake.notify_waiters();
        }
    }

    /// Registers a follow of the attempt until the `Following` is dropped.
    pub fn follow(&self, run: RunId, attempt: u32) -> Following {
        let mut attempts = self
            .0
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (n, wake) = attempts.entry((run, attempt)).or_default();
        *n += 1;
        let wake = wake.clone();
        self.0.count.fetch_add(1, Ordering::SeqCst);
        Following {
            watch: self.clone(),
            key: (run, attempt),
            wake,
        }
    }
}

/// One follow's registration. Take `notified()` and `enable` it before
/// reading the log: a notice sent after that is never missed.
pub struct Following {
    watch: LogWatch,
    key: (RunId, u32),
    wake: Arc<Notify>,
}

impl Following {
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let followed = &self.watch.0;
        let mut attempts = followed
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((n, _)) = attempts.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                attempts.remove(&self.key);
            }
        }
        followed.count.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_notice_after_enable_wakes_the_follow_and_others_do_not() {
        let watch = LogWatch::default();
        let following = watch.follow(RunId(1), 1);
        {
            let notified = following.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            watch.notice(RunId(2), 1);
            watch.notice(RunId(1), 2);
            let other = tokio::time::timeout(Duration::from_millis(20), notified.as_mut()).await;
            assert!(other.is_err(), "woken by another attempt's notice");
            watch.notice(RunId(1), 1);
            tokio::time::timeout(Duration::from_secs(1), notified)
                .await
                .expect("woken by its attempt's notice");
        }
        drop(following);
        assert_eq!(watch.0.count.load(Ordering::SeqCst), 0);
        assert!(watch.0.attempts.lock().unwrap().is_empty());
    }
}
