//! The cluster's change feed (docs/operations.md, "Cluster": `ax` and
//! `ax-tui` on any node see the whole cluster): a node's commit that
//! records events notifies `ax_events` with its id and the events'
//! numbers; every other node reads those events back and announces them
//! to its own subscribers as if they were its own.
//!
//! Payload: `<node> <seq>,<seq>,…`, or `<node> <first>-<last>` when the
//! list would not fit a notification (8000 bytes). Event numbers of
//! concurrent commits interleave, so a range may hold another node's
//! events too: readers drop numbers they have already announced.

use ax_protocol::api::EventView;

use super::{PgStore, on_client};
use crate::store::StoreError;
use crate::store::rows::{EVENT_COLUMNS, event_view};

/// Notified by a cluster node's commit that recorded events.
pub const EVENTS_CHANNEL: &str = "ax_events";

/// Longest list payload; longer ones are sent as a range.
const MAX_LIST: usize = 7000;

/// The events one notification names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventSeqs {
    List(Vec<i64>),
    Range(i64, i64),
}

/// The payload for `node`'s commit of events numbered `seqs` (sorted).
pub(super) fn payload(node: &str, seqs: &[i64]) -> String {
    let list: Vec<String> = seqs.iter().map(i64::to_string).collect();
    let list = list.join(",");
    match (seqs.first(), seqs.last()) {
        (Some(first), Some(last)) if list.len() > MAX_LIST => format!("{node} {first}-{last}"),
        _ => format!("{node} {list}"),
    }
}

/// The committing node and its events, from a payload; `None` for one
/// this axd cannot read (a newer version's, say): it is ignored.
pub fn parse_payload(payload: &str) -> Option<(&str, EventSeqs)> {
    let (node, seqs) = payload.split_once(' ')?;
    if let Some((first, last)) = seqs.split_once('-') {
        return Some((
            node,
            EventSeqs::Range(first.parse().ok()?, last.parse().ok()?),
        ));
    }
    let list = seqs
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<i64>, _>>()
        .ok()?;
    Some((node, EventSeqs::List(list)))
}

impl PgStore {
    /// The events with these numbers, oldest first.
    pub fn events_numbered(&mut self, seqs: &[i64]) -> Result<Vec<EventView>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE seq = ANY($1) ORDER BY seq"
                ))
                .await?;
            client
                .query(&statement, &[&seqs])
                .await?
                .iter()
                .map(event_view)
                .collect::<Result<Vec<_>, _>>()
        })
    }

    /// The events numbered `first..=last`, oldest first.
    pub fn events_between(&mut self, first: i64, last: i64) -> Result<Vec<EventView>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE seq BETWEEN $1 AND $2 ORDER BY seq"
                ))
                .await?;
            client
                .query(&statement, &[&first, &last])
                .await?
                .iter()
                .map(event_view)
                .collect::<Result<Vec<_>, _>>()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_the_node_and_its_events_and_long_lists_become_ranges() {
        let p = payload("web1-5f3a", &[7, 9, 12]);
        assert_eq!(p, "web1-5f3a 7,9,12");
        assert_eq!(
            parse_payload(&p),
            Some(("web1-5f3a", EventSeqs::List(vec![7, 9, 12])))
        );
        let many: Vec<i64> = (1_000_000..1_002_000).collect();
        let p = payload("n", &many);
        assert_eq!(p, "n 1000000-1001999");
        assert_eq!(
            parse_payload(&p),
            Some(("n", EventSeqs::Range(1_000_000, 1_001_999)))
        );
        assert_eq!(parse_payload("garbage"), None);
        assert_eq!(parse_payload("n 1,x"), None);
    }
}
