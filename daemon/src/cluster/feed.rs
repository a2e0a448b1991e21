//! The feed thread of a cluster node (docs/operations.md, "Cluster"):
//! events other nodes commit reach this node's subscribers (`ax-tui`,
//! `ax events -f`, `ax logs -f`), as this node's own do. The LISTEN
//! connection hands it the event numbers of each other node's commit
//! (`store::postgres::feed`); it reads those events back and gives them
//! to the scheduler, which announces them with its status. Nothing is
//! read while no one is subscribed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use ax_protocol::api::EventView;
use tokio::sync::broadcast;

use crate::bus::Msg;
use crate::store::postgres::{EventSeqs, PgStore};

/// Event numbers remembered as announced: a range payload (a commit of
/// more than about a thousand events) can overlap another node's list.
const REMEMBERED: usize = 65_536;

/// The numbers already announced, the newest `REMEMBERED` of them.
#[derive(Default)]
struct Announced(BTreeSet<i64>);

impl Announced {
    /// Keeps the events not announced before, and remembers them.
    fn fresh(&mut self, events: Vec<EventView>) -> Vec<EventView> {
        let fresh: Vec<EventView> = events
            .into_iter()
            .filter(|e| self.0.insert(e.seq))
            .collect();
        while self.0.len() > REMEMBERED {
            self.0.pop_first();
        }
        fresh
    }
}

/// The thread body: ends when the LISTEN side or the scheduler is gone.
pub(crate) fn run(
    mut store: PgStore,
    commits: Receiver<EventSeqs>,
    scheduler: Sender<Msg>,
    subscribers: broadcast::Sender<Arc<str>>,
) {
    let mut announced = Announced::default();
    let mut failing = false;
    while let Ok(first) = commits.recv() {
        let batch: Vec<EventSeqs> = std::iter::once(first).chain(commits.try_iter()).collect();
        if subscribers.receiver_count() == 0 {
            continue;
        }
        let mut listed = Vec::new();
        let mut events = Vec::new();
        let mut read = Ok(());
        for seqs in batch {
            match seqs {
                EventSeqs::List(l) => listed.extend(l),
                EventSeqs::Range(first, last) => match store.events_between(first, last) {
                    Ok(e) => events.extend(e),
                    Err(e) => read = Err(e),
                },
            }
        }
        if !listed.is_empty() {
            match store.events_numbered(&listed) {
                Ok(e) => events.extend(e),
                Err(e) => read = Err(e),
            }
        }
        match read {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("reading other nodes' events again");
            }
            Ok(()) => {}
            // Live views miss these; a console refetches when it
            // reconnects, and `ax events` reads the store.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!("cannot read other nodes' events: {e}");
            }
            Err(_) => {}
        }
        events.sort_by_key(|e| e.seq);
        let events = announced.fresh(events);
        if !events.is_empty() && scheduler.send(Msg::RemoteEvents(events)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> EventView {
        EventView {
            seq,
            ..EventView::default()
        }
    }

    #[test]
    fn an_event_is_announced_once_and_memory_stays_bounded() {
        let mut a = Announced::default();
        let seqs = |v: Vec<EventView>| v.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(a.fresh(vec![event(1), event(2)])), vec![1, 2]);
        assert_eq!(seqs(a.fresh(vec![event(2), event(3)])), vec![3]);
        a.fresh((10..10 + REMEMBERED as i64 + 5).map(event).collect());
        assert_eq!(a.0.len(), REMEMBERED);
        assert!(!a.0.contains(&1), "the oldest are forgotten");
    }
}
