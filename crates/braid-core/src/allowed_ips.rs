//! Cryptokey routing: which peer owns which inner IP addresses.
//!
//! WireGuard ties every peer to a set of "allowed IPs" (prefixes). An
//! outgoing IP packet is sent to the peer whose prefix matches its
//! destination most specifically (longest-prefix match), and a decrypted
//! incoming packet is accepted only if its source address maps back to the
//! peer it came from. A prefix belongs to at most one peer: claiming it
//! again moves it to the new claimant, as in WireGuard.
//!
//! Structure: one path-compressed binary trie per address family (IPv4 and
//! IPv6 never match each other; an IPv4-mapped IPv6 address is IPv6 here,
//! as in the kernel). Both tries store keys as `u128`, left-aligned, so an
//! IPv4 address occupies the top 32 bits and one implementation serves both
//! families. Each node holds a prefix (`key` masked to `prefix_len` bits)
//! and either a value (an allowed IP of some peer) or, when valueless, two
//! children: a fork where two longer prefixes part ways. Nodes without a
//! value and with fewer than two children are never kept, so the trie has at
//! most 2n − 1 nodes for n entries. A child's prefix always extends its
//! parent's; which child it is follows from the bit right after the
//! parent's prefix.
//!
//! Lookup walks down from the root comparing whole prefixes with one XOR and
//! `leading_zeros`, remembering the last node with a value: at most one step
//! per prefix length, O(32) or O(128), and no allocation. Insertion and
//! removal allocate or free at most two nodes; they run on configuration
//! changes, not per packet.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest-prefix-match table from IP prefixes to a peer identifier `T`.
/// See the module documentation.
#[derive(Clone, Debug)]
pub struct AllowedIps<T> {
    v4: Trie<T>,
    v6: Trie<T>,
}

/// A prefix length longer than the address it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidPrefix {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl fmt::Display for InvalidPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (family, bits) = match self.addr {
            IpAddr::V4(_) => ("IPv4", V4_BITS),
            IpAddr::V6(_) => ("IPv6", V6_BITS),
        };
        write!(
            f,
            "invalid prefix {}/{}: an {family} prefix is at most {bits} bits",
            self.addr, self.prefix
        )
    }
}

impl std::error::Error for InvalidPrefix {}

const V4_BITS: u8 = 32;
const V6_BITS: u8 = 128;

impl<T: Copy + Eq> AllowedIps<T> {
    pub const fn new() -> Self {
        AllowedIps {
            v4: Trie::new(),
            v6: Trie::new(),
        }
    }

    /// Maps `addr/prefix` to `value`, ignoring host bits of `addr` beyond
    /// the prefix. If the prefix was already present its previous value is
    /// replaced and returned: the allowed IP moves to the last peer that
    /// claims it.
    pub fn insert(
        &mut self,
        addr: IpAddr,
        prefix: u8,
        value: T,
    ) -> Result<Option<T>, InvalidPrefix> {
        let (trie, key) = self.trie_mut(addr, prefix)?;
        Ok(trie.insert(mask(key, prefix), prefix, value))
    }

    /// Removes the entry for exactly `addr/prefix` (host bits ignored) and
    /// returns its value. Shorter or longer prefixes covering the same
    /// address are left alone. An invalid prefix can hold nothing, so it
    /// yields `None`.
    pub fn remove(&mut self, addr: IpAddr, prefix: u8) -> Option<T> {
        let (trie, key) = self.trie_mut(addr, prefix).ok()?;
        trie.remove(mask(key, prefix), prefix)
    }

    /// Removes the entry for exactly `addr/prefix` if it maps to `value`
    /// (a prefix that moved on to another value stays); true if it did.
    /// O(prefix length): a peer that remembers its prefixes is cleared
    /// without a walk of the table.
    pub fn remove_if_value(&mut self, addr: IpAddr, prefix: u8, value: T) -> bool {
        let Ok((trie, key)) = self.trie_mut(addr, prefix) else {
            return false;
        };
        let removed = remove_at_if(&mut trie.root, mask(key, prefix), prefix, &|v| v == value);
        if removed.is_some() {
            trie.len -= 1;
        }
        removed.is_some()
    }

    /// The value of exactly `addr/prefix` (not of a longest match).
    pub fn get_exact(&self, addr: IpAddr, prefix: u8) -> Option<T> {
        let (trie, key) = match addr {
            IpAddr::V4(v4) if prefix <= V4_BITS => (&self.v4, v4_key(v4.octets())),
            IpAddr::V6(v6) if prefix <= V6_BITS => (&self.v6, u128::from(v6)),
            _ => return None,
        };
        let key = mask(key, prefix);
        let mut link = &trie.root;
        while let Some(node) = link {
            if node.prefix_len > prefix || !node.contains(key) {
                return None;
            }
            if node.prefix_len == prefix {
                return node.value;
            }
            link = &node.children[bit_at(key, node.prefix_len)];
        }
        None
    }

    /// Removes every entry that maps to `value` (a peer being removed).
    pub fn remove_value(&mut self, value: T) {
        self.v4.remove_value(value);
        self.v6.remove_value(value);
    }

    /// The value of the longest prefix containing `addr`, if any.
    #[must_use]
    pub fn lookup(&self, addr: IpAddr) -> Option<T> {
        match addr {
            IpAddr::V4(v4) => self.lookup_v4(v4.octets()),
            IpAddr::V6(v6) => self.lookup_v6(v6.octets()),
        }
    }

    /// [`lookup`](Self::lookup) for an IPv4 address in network byte order,
    /// as read straight out of a packet header.
    #[must_use]
    pub fn lookup_v4(&self, addr: [u8; 4]) -> Option<T> {
        self.v4.lookup(v4_key(addr))
    }

    /// [`lookup`](Self::lookup) for an IPv6 address in network byte order.
    #[must_use]
    pub fn lookup_v6(&self, addr: [u8; 16]) -> Option<T> {
        self.v6.lookup(u128::from_be_bytes(addr))
    }

    /// All prefixes mapped to `value`, IPv4 first, each family in address
    /// order with shorter prefixes before longer ones at the same address.
    pub fn entries_for(&self, value: T) -> Vec<(IpAddr, u8)> {
        let mut entries = Vec::new();
        self.v4.for_each(&mut |key, prefix, entry_value| {
            if entry_value == value {
                entries.push((IpAddr::V4(Ipv4Addr::from(v4_from_key(key))), prefix));
            }
        });
        self.v6.for_each(&mut |key, prefix, entry_value| {
            if entry_value == value {
                entries.push((IpAddr::V6(Ipv6Addr::from(key)), prefix));
            }
        });
        entries
    }

    /// Every prefix, grouped by the value it maps to (each group in the
    /// order of [`entries_for`](Self::entries_for)): one walk of the table
    /// for all values, where `entries_for` per value would walk it once
    /// each.
    pub fn entries_by_value(&self) -> std::collections::HashMap<T, Vec<(IpAddr, u8)>>
    where
        T: std::hash::Hash,
    {
        self.entries_by_value_where(|_| true)
    }

    /// [`entries_by_value`](Self::entries_by_value) for the values `keep`
    /// accepts only: one walk of the table, groups only for those (a
    /// listing in parts asks for one range of peers at a time).
    pub fn entries_by_value_where(
        &self,
        keep: impl Fn(T) -> bool,
    ) -> std::collections::HashMap<T, Vec<(IpAddr, u8)>>
    where
        T: std::hash::Hash,
    {
        let mut by = std::collections::HashMap::<T, Vec<(IpAddr, u8)>>::new();
        self.v4.for_each(&mut |key, prefix, value| {
            if keep(value) {
                let addr = IpAddr::V4(Ipv4Addr::from(v4_from_key(key)));
                by.entry(value).or_default().push((addr, prefix));
            }
        });
        self.v6.for_each(&mut |key, prefix, value| {
            if keep(value) {
                by.entry(value)
                    .or_default()
                    .push((IpAddr::V6(Ipv6Addr::from(key)), prefix));
            }
        });
        by
    }

    /// Number of prefixes in the table, both families together.
    pub fn len(&self) -> usize {
        self.v4.len + self.v6.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.v4 = Trie::new();
        self.v6 = Trie::new();
    }

    /// The trie for `addr`'s family and `addr` as a left-aligned key, after
    /// checking `prefix` fits the family.
    fn trie_mut(
        &mut self,
        addr: IpAddr,
        prefix: u8,
    ) -> Result<(&mut Trie<T>, u128), InvalidPrefix> {
        let (trie, key, bits) = match addr {
            IpAddr::V4(v4) => (&mut self.v4, v4_key(v4.octets()), V4_BITS),
            IpAddr::V6(v6) => (&mut self.v6, u128::from(v6), V6_BITS),
        };
        if prefix > bits {
            return Err(InvalidPrefix { addr, prefix });
        }
        Ok((trie, key))
    }
}

impl<T: Copy + Eq> Default for AllowedIps<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// `addr` with the bits past `prefix` cleared: the one spelling of a
/// prefix (an invalid length leaves the address as it is).
pub fn masked(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) if prefix <= V4_BITS => IpAddr::V4(Ipv4Addr::from(v4_from_key(mask(
            v4_key(v4.octets()),
            prefix,
        )))),
        IpAddr::V6(v6) if prefix <= V6_BITS => {
            IpAddr::V6(Ipv6Addr::from(mask(u128::from(v6), prefix)))
        }
        other => other,
    }
}

/// An IPv4 address as a trie key: in the top 32 bits, so that bit positions
/// count from the most significant bit in both families.
fn v4_key(addr: [u8; 4]) -> u128 {
    u128::from(u32::from_be_bytes(addr)) << 96
}

fn v4_from_key(key: u128) -> u32 {
    (key >> 96) as u32
}

/// `key` with everything after the first `prefix_len` bits zeroed.
fn mask(key: u128, prefix_len: u8) -> u128 {
    match prefix_len {
        0 => 0,
        _ => key & (u128::MAX << (128 - u32::from(prefix_len))),
    }
}

/// How many leading bits `a` and `b` share (128 when equal).
fn common_prefix_len(a: u128, b: u128) -> u8 {
    (a ^ b).leading_zeros() as u8
}

/// The bit after the first `position` bits of `key`: 0 or 1, which child to
/// descend into below a node whose prefix is `position` bits long.
fn bit_at(key: u128, position: u8) -> usize {
    debug_assert!(position < 128);
    ((key >> (127 - position)) & 1) as usize
}

type Link<T> = Option<Box<Node<T>>>;

#[derive(Clone, Debug)]
struct Node<T> {
    /// The prefix, with bits past `prefix_len` zero.
    key: u128,
    prefix_len: u8,
    /// `None` for a fork node, which then has both children.
    value: Option<T>,
    /// Indexed by [`bit_at`]`(key, prefix_len)` of the descendants.
    children: [Link<T>; 2],
}

impl<T> Node<T> {
    fn boxed(key: u128, prefix_len: u8, value: Option<T>) -> Box<Self> {
        Box::new(Node {
            key,
            prefix_len,
            value,
            children: [None, None],
        })
    }

    /// Whether `key` lies inside this node's prefix.
    fn contains(&self, key: u128) -> bool {
        common_prefix_len(key, self.key) >= self.prefix_len
    }
}

#[derive(Clone, Debug)]
struct Trie<T> {
    root: Link<T>,
    /// Nodes holding a value.
    len: usize,
}

impl<T: Copy + Eq> Trie<T> {
    const fn new() -> Self {
        Trie { root: None, len: 0 }
    }

    fn lookup(&self, key: u128) -> Option<T> {
        let mut best = None;
        let mut link = &self.root;
        while let Some(node) = link {
            if !node.contains(key) {
                break;
            }
            // Deeper nodes have longer prefixes, so the last value wins.
            if node.value.is_some() {
                best = node.value;
            }
            if node.prefix_len == V6_BITS {
                break;
            }
            link = &node.children[bit_at(key, node.prefix_len)];
        }
        best
    }

    /// `key` must already be masked to `prefix_len`.
    fn insert(&mut self, key: u128, prefix_len: u8, value: T) -> Option<T> {
        let previous = insert_at(&mut self.root, key, prefix_len, value);
        if previous.is_none() {
            self.len += 1;
        }
        previous
    }

    /// `key` must already be masked to `prefix_len`.
    fn remove(&mut self, key: u128, prefix_len: u8) -> Option<T> {
        let removed = remove_at(&mut self.root, key, prefix_len);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    fn remove_value(&mut self, value: T) {
        self.len -= remove_value_at(&mut self.root, value);
    }

    /// Visits every entry in key order, shorter prefixes first (pre-order,
    /// child 0 before child 1).
    fn for_each(&self, visit: &mut impl FnMut(u128, u8, T)) {
        fn walk<T: Copy>(link: &Link<T>, visit: &mut impl FnMut(u128, u8, T)) {
            if let Some(node) = link {
                if let Some(value) = node.value {
                    visit(node.key, node.prefix_len, value);
                }
                walk(&node.children[0], visit);
                walk(&node.children[1], visit);
            }
        }
        walk(&self.root, visit);
    }
}

/// Inserts into the subtree at `link`, returning the value replaced, if any.
/// Recursion depth is bounded by the prefix length (≤ 128).
fn insert_at<T>(link: &mut Link<T>, key: u128, prefix_len: u8, value: T) -> Option<T> {
    let Some(node) = link else {
        *link = Some(Node::boxed(key, prefix_len, Some(value)));
        return None;
    };
    let shared = common_prefix_len(key, node.key)
        .min(prefix_len)
        .min(node.prefix_len);
    if shared == node.prefix_len {
        if prefix_len == node.prefix_len {
            // Same prefix (both keys are masked): replace, possibly turning
            // a fork into an entry.
            return node.value.replace(value);
        }
        // The new prefix lies inside this node's: go down.
        let side = bit_at(key, node.prefix_len);
        return insert_at(&mut node.children[side], key, prefix_len, value);
    }

    // The new prefix does not lie inside `node`'s, so something new takes
    // `node`'s place and `node` hangs below it.
    let existing = link.take().expect("matched Some above");
    let replacement = if shared == prefix_len {
        // The new prefix contains `node`'s.
        let mut parent = Node::boxed(key, prefix_len, Some(value));
        let existing_side = bit_at(existing.key, prefix_len);
        parent.children[existing_side] = Some(existing);
        parent
    } else {
        // They part ways after `shared` bits: a fork with both below it.
        let mut fork = Node::boxed(mask(key, shared), shared, None);
        let new_side = bit_at(key, shared);
        fork.children[1 - new_side] = Some(existing);
        fork.children[new_side] = Some(Node::boxed(key, prefix_len, Some(value)));
        fork
    };
    *link = Some(replacement);
    None
}

/// Removes exactly `key/prefix_len` from the subtree at `link`.
fn remove_at<T: Copy>(link: &mut Link<T>, key: u128, prefix_len: u8) -> Option<T> {
    remove_at_if(link, key, prefix_len, &|_| true)
}

/// Removes exactly `key/prefix_len` from the subtree at `link` if its
/// value passes `matches`.
fn remove_at_if<T: Copy>(
    link: &mut Link<T>,
    key: u128,
    prefix_len: u8,
    matches: &dyn Fn(T) -> bool,
) -> Option<T> {
    let node = link.as_mut()?;
    if node.prefix_len > prefix_len || !node.contains(key) {
        return None;
    }
    let removed = if node.prefix_len == prefix_len {
        match node.value {
            Some(v) if matches(v) => node.value.take(),
            _ => None,
        }
    } else {
        let side = bit_at(key, node.prefix_len);
        remove_at_if(&mut node.children[side], key, prefix_len, matches)
    };
    if removed.is_some() {
        prune(link);
    }
    removed
}

/// Removes all entries equal to `value` below `link`; returns how many.
fn remove_value_at<T: Copy + Eq>(link: &mut Link<T>, value: T) -> usize {
    let Some(node) = link else {
        return 0;
    };
    let mut removed = remove_value_at(&mut node.children[0], value)
        + remove_value_at(&mut node.children[1], value);
    if node.value == Some(value) {
        node.value = None;
        removed += 1;
    }
    prune(link);
    removed
}

/// Restores the invariant that a valueless node is a fork with two
/// children, after something at or below `link` was removed: a valueless
/// leaf disappears, a valueless node with one child is replaced by that
/// child (whose prefix extends it, so it fits the same slot).
fn prune<T>(link: &mut Link<T>) {
    let Some(node) = link else {
        return;
    };
    if node.value.is_some() || (node.children[0].is_some() && node.children[1].is_some()) {
        return;
    }
    let mut node = link.take().expect("matched Some above");
    *link = node.children[0].take().or_else(|| node.children[1].take());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn v6(text: &str) -> IpAddr {
        IpAddr::V6(text.parse().unwrap())
    }

    /// Checks the structural invariants and that `len` matches the entries.
    fn assert_well_formed<T: Copy + Eq + fmt::Debug>(table: &AllowedIps<T>) {
        fn walk<T>(link: &Link<T>, parent_len: Option<u8>, parent_key: u128, bits: u8) -> usize {
            let Some(node) = link else { return 0 };
            assert!(node.prefix_len <= bits);
            assert_eq!(node.key, mask(node.key, node.prefix_len), "unmasked key");
            if let Some(parent_len) = parent_len {
                assert!(node.prefix_len > parent_len, "child not longer than parent");
                assert!(
                    common_prefix_len(node.key, parent_key) >= parent_len,
                    "child outside parent"
                );
            }
            if node.value.is_none() {
                assert!(
                    node.children[0].is_some() && node.children[1].is_some(),
                    "valueless node without two children"
                );
            }
            for (side, child) in node.children.iter().enumerate() {
                if let Some(child) = child {
                    assert_eq!(
                        bit_at(child.key, node.prefix_len),
                        side,
                        "child on wrong side"
                    );
                }
            }
            usize::from(node.value.is_some())
                + walk(&node.children[0], Some(node.prefix_len), node.key, bits)
                + walk(&node.children[1], Some(node.prefix_len), node.key, bits)
        }
        assert_eq!(walk(&table.v4.root, None, 0, V4_BITS), table.v4.len);
        assert_eq!(walk(&table.v6.root, None, 0, V6_BITS), table.v6.len);
        // The v4 trie only ever holds keys in the top 32 bits.
        table
            .v4
            .for_each(&mut |key, _, _| assert_eq!(key & (u128::MAX >> 32), 0));
    }

    #[test]
    fn an_entry_is_removed_by_value_only_while_it_has_that_value() {
        let mut t = AllowedIps::new();
        t.insert(v4(198, 19, 0, 0), 16, 1).unwrap();
        t.insert(v4(198, 19, 7, 0), 24, 1).unwrap();
        t.insert(v6("2001:db8::"), 32, 2).unwrap();
        assert_eq!(
            t.get_exact(v4(198, 19, 9, 9), 16),
            Some(1),
            "host bits ignored"
        );
        assert_eq!(t.get_exact(v4(198, 19, 7, 0), 23), None, "no such prefix");
        assert_eq!(t.get_exact(v6("2001:db8::"), 32), Some(2));
        assert_eq!(t.get_exact(v4(1, 2, 3, 4), 40), None, "too long");
        // The /24 moves to 2: removing it as 1's does nothing.
        t.insert(v4(198, 19, 7, 0), 24, 2).unwrap();
        assert!(!t.remove_if_value(v4(198, 19, 7, 0), 24, 1));
        assert_eq!(t.lookup(v4(198, 19, 7, 1)), Some(2));
        assert!(t.remove_if_value(v4(198, 19, 0, 0), 16, 1));
        assert!(!t.remove_if_value(v4(198, 19, 0, 0), 16, 1), "gone already");
        assert_eq!(t.len(), 2);
        assert_well_formed(&t);
        assert_eq!(masked(v4(198, 19, 7, 9), 24), v4(198, 19, 7, 0));
        assert_eq!(masked(v6("2001:db8::1"), 32), v6("2001:db8::"));
        assert_eq!(masked(v4(1, 2, 3, 4), 33), v4(1, 2, 3, 4));
    }

    #[test]
    fn case_table() {
        let mut table = AllowedIps::new();
        assert!(table.is_empty());
        assert_eq!(table.lookup(v4(10, 0, 0, 1)), None);

        let inserts: &[(IpAddr, u8, u32)] = &[
            (v4(10, 0, 0, 0), 8, 1),
            (v4(10, 1, 0, 0), 16, 2),
            (v4(10, 1, 2, 0), 24, 3),
            (v4(10, 1, 2, 3), 32, 4),
            (v4(10, 1, 2, 128), 25, 5),
            (v4(192, 168, 7, 99), 24, 6), // host bits are masked off
            (v4(172, 16, 0, 0), 12, 7),
            (v6("2001:db8::"), 32, 10),
            (v6("2001:db8:1::"), 48, 11),
            (v6("2001:db8:1::1"), 128, 12),
            (v6("fd00::"), 8, 13),
        ];
        for &(addr, prefix, value) in inserts {
            assert_eq!(
                table.insert(addr, prefix, value),
                Ok(None),
                "{addr}/{prefix}"
            );
            assert_well_formed(&table);
        }
        assert_eq!(table.len(), inserts.len());

        let cases: &[(IpAddr, Option<u32>)] = &[
            /* 1 */ (v4(10, 0, 0, 1), Some(1)),
            /* 2 */ (v4(10, 255, 255, 255), Some(1)),
            /* 3 */ (v4(10, 1, 0, 1), Some(2)),
            /* 4 */ (v4(10, 1, 2, 1), Some(3)),
            /* 5 */ (v4(10, 1, 2, 3), Some(4)),
            /* 6 */ (v4(10, 1, 2, 4), Some(3)),
            /* 7 */ (v4(10, 1, 2, 127), Some(3)),
            /* 8 */ (v4(10, 1, 2, 128), Some(5)),
            /* 9 */ (v4(10, 1, 2, 255), Some(5)),
            /* 10 */ (v4(10, 1, 3, 0), Some(2)),
            /* 11 */ (v4(11, 0, 0, 0), None),
            /* 12 */ (v4(9, 255, 255, 255), None),
            /* 13 */ (v4(192, 168, 7, 0), Some(6)),
            /* 14 */ (v4(192, 168, 7, 255), Some(6)),
            /* 15 */ (v4(192, 168, 8, 0), None),
            /* 16 */ (v4(172, 31, 255, 255), Some(7)),
            /* 17 */ (v4(172, 32, 0, 0), None),
            /* 18 */ (v4(172, 15, 255, 255), None),
            /* 19 */ (v6("2001:db8::1"), Some(10)),
            /* 20 */ (v6("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"), Some(10)),
            /* 21 */ (v6("2001:db8:1::2"), Some(11)),
            /* 22 */ (v6("2001:db8:1::1"), Some(12)),
            /* 23 */ (v6("2001:db9::"), None),
            /* 24 */ (v6("fdff:1234::"), Some(13)),
            /* 25 */ (v6("fe00::"), None),
            // v4 and v6 are separate: the v6 address with the same leading
            // bits as 10/8, and the v4-mapped form, match nothing.
            /* 26 */
            (v6("a00::1"), None),
            /* 27 */ (v6("::ffff:10.0.0.1"), None),
            /* 28 */ (v4(0x20, 0x01, 0x0d, 0xb8), None),
        ];
        for (number, &(addr, expected)) in cases.iter().enumerate() {
            assert_eq!(table.lookup(addr), expected, "case {}: {addr}", number + 1);
            let direct = match addr {
                IpAddr::V4(a) => table.lookup_v4(a.octets()),
                IpAddr::V6(a) => table.lookup_v6(a.octets()),
            };
            assert_eq!(
                direct,
                expected,
                "case {}: {addr} (family lookup)",
                number + 1
            );
        }

        // /0 default routes catch everything of their own family only.
        assert_eq!(table.insert(v4(1, 2, 3, 4), 0, 20), Ok(None));
        assert_eq!(table.lookup(v4(11, 0, 0, 0)), Some(20));
        assert_eq!(table.lookup(v4(10, 1, 2, 3)), Some(4));
        assert_eq!(table.lookup(v6("fe00::")), None);
        assert_eq!(table.insert(v6("::"), 0, 21), Ok(None));
        assert_eq!(table.lookup(v6("fe00::")), Some(21));
        assert_eq!(table.lookup(v6("2001:db8:1::1")), Some(12));
        assert_eq!(table.lookup(v4(255, 255, 255, 255)), Some(20));
        assert_well_formed(&table);

        // Claiming a prefix again moves it to the new peer.
        assert_eq!(table.insert(v4(10, 1, 2, 3), 32, 9), Ok(Some(4)));
        assert_eq!(table.lookup(v4(10, 1, 2, 3)), Some(9));
        assert_eq!(table.insert(v4(10, 1, 99, 99), 16, 9), Ok(Some(2)));
        assert_eq!(table.lookup(v4(10, 1, 3, 0)), Some(9));
        assert_eq!(table.entries_for(2), vec![]);
        assert_eq!(
            table.entries_for(9),
            vec![(v4(10, 1, 0, 0), 16), (v4(10, 1, 2, 3), 32)]
        );
        let len = table.len();
        assert_eq!(len, inserts.len() + 2);

        // Removal is exact: only that prefix goes, shorter ones take over.
        assert_eq!(table.remove(v4(10, 1, 2, 7), 24), Some(3));
        assert_eq!(table.remove(v4(10, 1, 2, 0), 24), None);
        assert_eq!(table.lookup(v4(10, 1, 2, 1)), Some(9));
        assert_eq!(table.lookup(v4(10, 1, 2, 200)), Some(5));
        assert_eq!(table.remove(v4(10, 1, 0, 0), 15), None);
        assert_eq!(table.remove(v6("2001:db8::"), 33), None);
        assert_eq!(table.len(), len - 1);
        assert_well_formed(&table);

        // Dropping a peer drops all its prefixes.
        table.remove_value(9);
        assert_eq!(table.entries_for(9), vec![]);
        assert_eq!(table.lookup(v4(10, 1, 2, 3)), Some(1));
        assert_eq!(table.len(), len - 3);
        assert_well_formed(&table);

        table.remove_value(20);
        table.remove_value(21);
        assert_eq!(table.lookup(v4(11, 0, 0, 0)), None);
        assert_eq!(table.lookup(v6("fe00::")), None);

        assert_eq!(table.entries_for(11), vec![(v6("2001:db8:1::"), 48)],);
        table.clear();
        assert!(table.is_empty());
        assert_eq!(table.lookup(v4(10, 0, 0, 1)), None);
        assert_eq!(table.entries_for(1), vec![]);
    }

    #[test]
    fn invalid_prefixes_are_rejected_without_panicking() {
        let mut table = AllowedIps::new();
        let error = table.insert(v4(10, 0, 0, 0), 33, 1).unwrap_err();
        assert_eq!(
            error,
            InvalidPrefix {
                addr: v4(10, 0, 0, 0),
                prefix: 33
            }
        );
        assert!(error.to_string().contains("/33"));
        assert!(table.insert(v6("::1"), 129, 1).is_err());
        assert!(table.insert(v6("::1"), 255, 1).is_err());
        assert_eq!(table.insert(v4(10, 0, 0, 1), 32, 1), Ok(None));
        assert_eq!(table.insert(v6("::1"), 128, 1), Ok(None));
        assert_eq!(table.remove(v4(10, 0, 0, 1), 33), None);
        assert_eq!(table.remove(v6("::1"), 200), None);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn host_bits_are_masked_and_reported_masked() {
        let mut table = AllowedIps::new();
        table.insert(v4(192, 168, 1, 77), 24, 'a').unwrap();
        table.insert(v6("fd00::dead:beef"), 64, 'a').unwrap();
        assert_eq!(table.insert(v4(192, 168, 1, 0), 24, 'b'), Ok(Some('a')));
        assert_eq!(table.entries_for('a'), vec![(v6("fd00::"), 64)]);
        assert_eq!(table.entries_for('b'), vec![(v4(192, 168, 1, 0), 24)]);
        assert_eq!(table.remove(v6("fd00::1"), 64), Some('a'));
        assert!(table.entries_for('a').is_empty());
    }

    #[test]
    fn forks_collapse_when_entries_go() {
        let mut table = AllowedIps::new();
        // Two siblings force a fork node; inserting their parent prefix
        // turns the fork into an entry, removing it turns it back.
        table.insert(v4(10, 0, 0, 0), 24, 1).unwrap();
        table.insert(v4(10, 0, 1, 0), 24, 2).unwrap();
        assert_well_formed(&table);
        table.insert(v4(10, 0, 0, 0), 23, 3).unwrap();
        assert_well_formed(&table);
        assert_eq!(table.remove(v4(10, 0, 0, 0), 23), Some(3));
        assert_well_formed(&table);
        assert_eq!(table.remove(v4(10, 0, 0, 0), 24), Some(1));
        assert_well_formed(&table);
        assert_eq!(table.lookup(v4(10, 0, 1, 5)), Some(2));
        assert_eq!(table.remove(v4(10, 0, 1, 0), 24), Some(2));
        assert!(table.v4.root.is_none());
        assert!(table.is_empty());
    }

    /// Deliberately naive: a list scanned linearly for the longest match.
    #[derive(Default)]
    struct Model {
        entries: Vec<(IpAddr, u8, u32)>,
    }

    impl Model {
        fn normalize(addr: IpAddr, prefix: u8) -> IpAddr {
            match addr {
                IpAddr::V4(a) => {
                    let bits = u32::from(a);
                    let masked = if prefix == 0 {
                        0
                    } else {
                        bits & (u32::MAX << (32 - prefix))
                    };
                    IpAddr::V4(masked.into())
                }
                IpAddr::V6(a) => {
                    let bits = u128::from(a);
                    let masked = if prefix == 0 {
                        0
                    } else {
                        bits & (u128::MAX << (128 - prefix))
                    };
                    IpAddr::V6(masked.into())
                }
            }
        }

        fn insert(&mut self, addr: IpAddr, prefix: u8, value: u32) -> Option<u32> {
            let network = Self::normalize(addr, prefix);
            let previous = self.remove(network, prefix);
            self.entries.push((network, prefix, value));
            previous
        }

        fn remove(&mut self, addr: IpAddr, prefix: u8) -> Option<u32> {
            let network = Self::normalize(addr, prefix);
            let index = self
                .entries
                .iter()
                .position(|&(n, p, _)| n == network && p == prefix)?;
            Some(self.entries.remove(index).2)
        }

        fn lookup(&self, addr: IpAddr) -> Option<u32> {
            self.entries
                .iter()
                .filter(|&&(network, prefix, _)| {
                    network.is_ipv4() == addr.is_ipv4() && Self::normalize(addr, prefix) == network
                })
                .max_by_key(|&&(_, prefix, _)| prefix)
                .map(|&(_, _, value)| value)
        }

        fn entries_for(&self, value: u32) -> Vec<(IpAddr, u8)> {
            let mut entries: Vec<_> = self
                .entries
                .iter()
                .filter(|&&(_, _, v)| v == value)
                .map(|&(n, p, _)| (n, p))
                .collect();
            entries.sort_by_key(|&(addr, prefix)| (addr.is_ipv6(), addr, prefix));
            entries
        }
    }

    /// Random addresses that share long prefixes often: a few base
    /// addresses with some random bits flipped, as the kernel selftest does.
    fn random_addr(rng: &mut ChaCha8Rng, bases: &[u128]) -> IpAddr {
        let base = bases[(rng.next_u32() as usize) % bases.len()];
        let is_v4 = rng.next_u32() & 1 == 0;
        let bits = if is_v4 { 32 } else { 128 };
        let mut key = base;
        for _ in 0..rng.next_u32() % 4 {
            // Flip within the family's bits (v4 keys live in the top 32).
            key ^= 1 << (127 - rng.next_u32() % bits);
        }
        if is_v4 {
            IpAddr::V4(Ipv4Addr::from(v4_from_key(key)))
        } else {
            IpAddr::V6(Ipv6Addr::from(key))
        }
    }

    fn random_prefix(rng: &mut ChaCha8Rng, addr: IpAddr) -> u8 {
        let bits: u8 = if addr.is_ipv4() { 33 } else { 129 };
        // Favour a few common lengths so equal prefixes get re-claimed.
        match rng.next_u32() % 3 {
            0 => [0u8, 8, 16, 24, 32][(rng.next_u32() % 5) as usize].min(bits - 1),
            _ => (rng.next_u32() % u32::from(bits)) as u8,
        }
    }

    /// Lookups right at and just past the edges of a prefix.
    fn edge_addresses(addr: IpAddr, prefix: u8) -> [IpAddr; 4] {
        match addr {
            IpAddr::V4(a) => {
                let host_mask = u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
                let first = u32::from(a) & !host_mask;
                let last = first | host_mask;
                [first, last, first.wrapping_sub(1), last.wrapping_add(1)]
                    .map(|x| IpAddr::V4(x.into()))
            }
            IpAddr::V6(a) => {
                let host_mask = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
                let first = u128::from(a) & !host_mask;
                let last = first | host_mask;
                [first, last, first.wrapping_sub(1), last.wrapping_add(1)]
                    .map(|x| IpAddr::V6(x.into()))
            }
        }
    }

    fn run_against_model(seed: u64, operations: usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let bases: Vec<u128> = (0..6)
            .map(|_| (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64()))
            .collect();
        let mut table = AllowedIps::new();
        let mut model = Model::default();
        for step in 0..operations {
            let addr = random_addr(&mut rng, &bases);
            let prefix = random_prefix(&mut rng, addr);
            let value = rng.next_u32() % 8;
            match rng.next_u32() % 16 {
                0..=8 => assert_eq!(
                    table.insert(addr, prefix, value),
                    Ok(model.insert(addr, prefix, value)),
                    "step {step}: insert {addr}/{prefix}"
                ),
                9..=13 => {
                    // Half the time remove something known to be there.
                    let (addr, prefix) = if rng.next_u32() & 1 == 0 && !model.entries.is_empty() {
                        let (n, p, _) =
                            model.entries[(rng.next_u32() as usize) % model.entries.len()];
                        (n, p)
                    } else {
                        (addr, prefix)
                    };
                    assert_eq!(
                        table.remove(addr, prefix),
                        model.remove(addr, prefix),
                        "step {step}: remove {addr}/{prefix}"
                    );
                }
                14 => {
                    table.remove_value(value);
                    model.entries.retain(|&(_, _, v)| v != value);
                }
                _ => assert_eq!(
                    table.entries_for(value),
                    model.entries_for(value),
                    "step {step}"
                ),
            }
            assert_eq!(table.len(), model.entries.len(), "step {step}: len");
            for probe in edge_addresses(addr, prefix)
                .into_iter()
                .chain((0..4).map(|_| random_addr(&mut rng, &bases)))
            {
                assert_eq!(
                    table.lookup(probe),
                    model.lookup(probe),
                    "step {step}: lookup {probe}"
                );
            }
        }
        assert_well_formed(&table);
        for value in 0..8 {
            assert_eq!(table.entries_for(value), model.entries_for(value));
        }
    }

    #[test]
    fn randomized_against_naive_model() {
        for seed in 0..8 {
            run_against_model(seed, 1500);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(IpAddr, u8, u32),
        Remove(IpAddr, u8),
        RemoveValue(u32),
    }

    fn addr_strategy() -> impl Strategy<Value = IpAddr> {
        // Addresses from a narrow range so prefixes overlap.
        prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(c, d)| v4(10, 0, c & 0x0f, d)),
            (any::<u16>()).prop_map(|x| IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                0,
                0,
                0,
                0,
                0,
                0,
                x & 0x0fff
            ))),
        ]
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (addr_strategy(), 0u8..=128, 0u32..4).prop_map(|(a, p, v)| {
                let p = if a.is_ipv4() { p % 33 } else { p };
                Op::Insert(a, p, v)
            }),
            3 => (addr_strategy(), 0u8..=128).prop_map(|(a, p)| Op::Remove(a, if a.is_ipv4() { p % 33 } else { p })),
            1 => (0u32..4).prop_map(Op::RemoveValue),
        ]
    }

    proptest! {
        #[test]
        fn proptest_against_naive_model(
            ops in prop::collection::vec(op_strategy(), 1..60),
            probes in prop::collection::vec(addr_strategy(), 1..20),
        ) {
            let mut table = AllowedIps::new();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Insert(a, p, v) => prop_assert_eq!(table.insert(a, p, v), Ok(model.insert(a, p, v))),
                    Op::Remove(a, p) => prop_assert_eq!(table.remove(a, p), model.remove(a, p)),
                    Op::RemoveValue(v) => {
                        table.remove_value(v);
                        model.entries.retain(|&(_, _, x)| x != v);
                    }
                }
                prop_assert_eq!(table.len(), model.entries.len());
                for &probe in &probes {
                    prop_assert_eq!(table.lookup(probe), model.lookup(probe), "lookup {}", probe);
                }
            }
            assert_well_formed(&table);
            for v in 0..4 {
                prop_assert_eq!(table.entries_for(v), model.entries_for(v));
            }
        }
    }
}
