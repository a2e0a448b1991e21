//! The fair share of a pool's slots between the nodes that want them
//! (docs/operations.md, "Cluster": each node takes work up to its free
//! slots, pool limits hold cluster-wide).
//!
//! The rule, applied by every node to the same stakes read from the
//! database, is a max-min fair split of the pool's `slots` over the
//! nodes holding or wanting slots of it, each with its *demand* (the
//! slots it could use: leased plus wanted for another node, held plus
//! ready runs for this one):
//!
//! - a node whose demand is at most an even split of what is left gets
//!   its demand (it never gives up what it can use to make room for a
//!   share nobody needs), and the rest is split again among the others;
//! - the others get the even split each, `slots / nodes` rounded down (so
//!   each gets at least one while there are at least as many slots as
//!   nodes); the remainder goes to the nodes that hold the most slots
//!   now, then by node id, so that a remainder never moves between nodes
//!   (nor do all slots of a pool with fewer slots than wanting nodes).
//!
//! A node only acts on its own share: holding more while another node
//! wants slots, it stops using the excess (the engine keeps a slot taken
//! away with its running attempt until that ends) and gives it back;
//! holding less, it leases free slots up to its share.

use std::cmp::Reverse;
use std::collections::HashMap;

/// One node's stake in a pool, as the share rule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Claim<'a> {
    pub node: &'a str,
    /// Slots it has leased now.
    pub leased: u32,
    /// Slots it could use.
    pub demand: u32,
}

/// Each node's share of a pool of `slots` (see the module's rule).
pub(super) fn shares<'a>(slots: u32, claims: &[Claim<'a>]) -> HashMap<&'a str, u32> {
    let mut out = HashMap::with_capacity(claims.len());
    let mut left = slots;
    let mut rest: Vec<&Claim<'a>> = claims.iter().collect();
    while !rest.is_empty() {
        let even = left / rest.len() as u32;
        let (small, big): (Vec<&Claim>, Vec<&Claim>) =
            rest.into_iter().partition(|c| c.demand <= even);
        if small.is_empty() {
            let mut big = big;
            big.sort_by_key(|c| (Reverse(c.leased), c.node));
            let extra = (left % big.len() as u32) as usize;
            for (i, c) in big.iter().enumerate() {
                out.insert(c.node, even + u32::from(i < extra));
            }
            break;
        }
        for c in small {
            out.insert(c.node, c.demand);
            left -= c.demand;
        }
        rest = big;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(node: &str, leased: u32, demand: u32) -> Claim<'_> {
        Claim {
            node,
            leased,
            demand,
        }
    }

    #[test]
    fn two_nodes_wanting_more_than_the_pool_split_it_evenly() {
        // A filled the pool before B wanted any.
        let s = shares(2, &[claim("a", 2, 8), claim("b", 0, 4)]);
        assert_eq!((s["a"], s["b"]), (1, 1));
        let s = shares(6, &[claim("a", 6, 30), claim("b", 0, 9), claim("c", 0, 1)]);
        assert_eq!((s["a"], s["b"], s["c"]), (3, 2, 1), "{s:?}");
    }

    #[test]
    fn a_node_keeps_what_it_can_use_below_an_even_split() {
        let s = shares(4, &[claim("a", 3, 10), claim("b", 1, 1)]);
        assert_eq!((s["a"], s["b"]), (3, 1));
        let s = shares(
            10,
            &[claim("a", 0, 2), claim("b", 0, 3), claim("c", 10, 50)],
        );
        assert_eq!((s["a"], s["b"], s["c"]), (2, 3, 5));
    }

    #[test]
    fn a_remainder_stays_with_the_node_holding_it() {
        for (a, b) in [(2, 1), (1, 2)] {
            let s = shares(3, &[claim("a", a, 9), claim("b", b, 9)]);
            assert_eq!((s["a"], s["b"]), (a, b));
        }
        // Fewer slots than wanting nodes: the holder keeps its slot.
        let s = shares(1, &[claim("a", 0, 5), claim("b", 1, 5), claim("c", 0, 5)]);
        assert_eq!((s["a"], s["b"], s["c"]), (0, 1, 0));
    }

    #[test]
    fn shares_never_exceed_the_pool_and_each_wanting_node_gets_one() {
        for slots in 0..12u32 {
            for n in 1..5u32 {
                let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
                let claims: Vec<Claim> = names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| claim(name, (i as u32 * 3) % 4, 1 + (i as u32 * 5) % 7))
                    .collect();
                let s = shares(slots, &claims);
                let total: u32 = s.values().sum();
                assert!(total <= slots, "{slots} {claims:?} {s:?}");
                let demand: u32 = claims.iter().map(|c| c.demand).sum();
                assert_eq!(total, slots.min(demand), "no slot left unused: {s:?}");
                for c in &claims {
                    assert!(s[c.node] <= c.demand, "{s:?}");
                    if slots >= n {
                        assert!(s[c.node] >= 1, "{slots} {claims:?} {s:?}");
                    }
                }
            }
        }
    }
}
