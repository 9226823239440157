//! A domain's tree of descriptors, and which rule a request descriptor
//! matches.

use std::{collections::HashMap, fmt, sync::Arc};

use smallvec::SmallVec;

use super::rule::Rule;

/// One entry of a request descriptor: a key and its value.
///
/// Its [`Debug`](fmt::Debug) shows the key only: values identify clients.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The entry's key (`remote_address`, `header_match`, …).
    pub key: &'a str,
    /// The entry's value; empty when the proxy sent none.
    pub value: &'a str,
}

impl<'a> Entry<'a> {
    /// An entry of `key` and `value`.
    #[must_use]
    pub const fn new(key: &'a str, value: &'a str) -> Self {
        Self { key, value }
    }
}

impl fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The rule a request descriptor matched, and what keys its counter: the
/// rule borrows from the configuration (`'c`), the subject from the request
/// (`'r`) and the configuration.
///
/// Its [`Debug`](fmt::Debug) leaves out the subject: values identify
/// clients.
#[derive(Clone)]
#[non_exhaustive]
pub struct Matched<'c, 'r> {
    /// The rule.
    pub rule: &'c Rule,
    /// One value per request entry, in order, that together with the
    /// entries' keys identify the counter: the request's value, or, where
    /// the entry matched a wildcard descriptor with `share_threshold`, the
    /// wildcard pattern, so that every matching value shares one counter.
    pub subject: SmallVec<[&'r str; 4]>,
}

impl fmt::Debug for Matched<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matched")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// The rules of one domain, as a tree of descriptors.
#[derive(Debug, Clone)]
pub struct Domain {
    name: Arc<str>,
    root: Level,
}

impl Domain {
    pub(crate) fn new(name: Arc<str>, root: Level) -> Self {
        Self { name, root }
    }

    /// The domain's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule `entries` match, as the reference service matches them, and
    /// the subject that keys its counter; `None` when no rule applies.
    ///
    /// Each entry in turn selects a descriptor among the children of the one
    /// the previous entry selected (the domain's top-level descriptors for
    /// the first): the descriptor whose composite key `key_value` equals the
    /// entry's, else the first wildcard descriptor, in file order, whose
    /// pattern matches it, else the descriptor with the entry's key and no
    /// value. The rule is the one on the descriptor the last entry selects:
    /// a request longer or shorter than the path to a rule does not match
    /// it, and an entry that selects nothing ends the search with no rule.
    /// There is no fallback to another branch.
    #[must_use]
    pub fn resolve<'c: 'r, 'r>(&'c self, entries: &[Entry<'r>]) -> Option<Matched<'c, 'r>> {
        let mut level = &self.root;
        let mut subject = SmallVec::new();
        let mut composite = SmallVec::<[u8; 128]>::new();
        for (depth, entry) in entries.iter().enumerate() {
            composite.clear();
            composite.extend_from_slice(entry.key.as_bytes());
            composite.push(b'_');
            composite.extend_from_slice(entry.value.as_bytes());
            let (descriptor, by_pattern) = level.select(&composite, entry.key)?;
            subject.push(descriptor.subject_value(entry, by_pattern));
            if depth + 1 == entries.len() {
                return descriptor
                    .rule
                    .as_ref()
                    .map(|rule| Matched { rule, subject });
            }
            level = &descriptor.children;
        }
        None
    }

    /// Every rule of the domain, depth first in file order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        let mut rules = Vec::new();
        self.root.collect_rules(&mut rules);
        rules.into_iter()
    }

    /// Calls `f` with every rule, mutably.
    pub(crate) fn for_each_rule_mut(&mut self, f: &mut impl FnMut(&mut Rule)) {
        self.root.for_each_rule_mut(f);
    }
}

/// The children of one descriptor (or a domain's top level), looked up as
/// the reference looks them up: by composite key, then wildcards in file
/// order, then by bare key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Level {
    descriptors: Vec<Descriptor>,
    /// Composite key → index in `descriptors`.
    exact: HashMap<Box<[u8]>, usize>,
    /// Indexes of the wildcard descriptors, in file order.
    wildcards: Vec<usize>,
}

impl Level {
    /// Whether a sibling already has `composite`.
    pub(crate) fn contains(&self, composite: &str) -> bool {
        self.exact.contains_key(composite.as_bytes())
    }

    /// Adds a descriptor whose composite key no sibling has.
    pub(crate) fn push(&mut self, descriptor: Descriptor) {
        let index = self.descriptors.len();
        if descriptor.pattern.is_some() {
            self.wildcards.push(index);
        }
        self.exact
            .insert(descriptor.composite.as_bytes().into(), index);
        self.descriptors.push(descriptor);
    }

    /// The descriptor an entry of composite key `composite` and key `key`
    /// selects, and whether its pattern selected it.
    fn select(&self, composite: &[u8], key: &str) -> Option<(&Descriptor, bool)> {
        if let Some(index) = self.exact.get(composite) {
            return Some((&self.descriptors[*index], false));
        }
        let wildcard = self.wildcards.iter().find_map(|index| {
            let descriptor = &self.descriptors[*index];
            let pattern = descriptor.pattern.as_ref()?;
            pattern.matches(composite).then_some(descriptor)
        });
        if let Some(descriptor) = wildcard {
            return Some((descriptor, true));
        }
        let index = self.exact.get(key.as_bytes())?;
        Some((&self.descriptors[*index], false))
    }

    fn collect_rules<'a>(&'a self, rules: &mut Vec<&'a Rule>) {
        for descriptor in &self.descriptors {
            rules.extend(&descriptor.rule);
            descriptor.children.collect_rules(rules);
        }
    }

    fn for_each_rule_mut(&mut self, f: &mut impl FnMut(&mut Rule)) {
        for descriptor in &mut self.descriptors {
            if let Some(rule) = &mut descriptor.rule {
                f(rule);
            }
            descriptor.children.for_each_rule_mut(f);
        }
    }
}

/// One descriptor of the configuration.
#[derive(Debug, Clone)]
pub(crate) struct Descriptor {
    /// `key`, or `key_value`.
    composite: Box<str>,
    /// The wildcard pattern, for a descriptor whose value has a `*` (or
    /// whose key ends in one and that has no value).
    pattern: Option<Pattern>,
    /// Whether every value matching the pattern shares one counter.
    share_threshold: bool,
    rule: Option<Rule>,
    children: Level,
}

impl Descriptor {
    pub(crate) fn new(
        key: &str,
        value: &str,
        share_threshold: bool,
        rule: Option<Rule>,
        children: Level,
    ) -> Self {
        Self {
            composite: composite(key, value).into(),
            pattern: Pattern::new(key, value),
            share_threshold,
            rule,
            children,
        }
    }

    /// The value that keys `entry`'s part of a counter, for an entry this
    /// descriptor's pattern selected or not.
    fn subject_value<'c: 'r, 'r>(&'c self, entry: &Entry<'r>, by_pattern: bool) -> &'r str {
        if !(by_pattern && self.share_threshold) {
            return entry.value;
        }
        // The pattern without the entry's `key_` prefix, as the reference
        // keys a shared counter.
        self.composite
            .strip_prefix(entry.key)
            .and_then(|rest| rest.strip_prefix('_'))
            .unwrap_or(&self.composite)
    }
}

/// A descriptor's composite key: `key`, or `key_value` when it has a value.
pub(crate) fn composite(key: &str, value: &str) -> String {
    if value.is_empty() {
        key.to_owned()
    } else {
        format!("{key}_{value}")
    }
}

/// A wildcard: the composite key's literal parts around its `*`s. Every `*`
/// in the value is a wildcard; without a value, a `*` ending the key is one
/// (the key's other `*`s are literal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    /// At least two parts: what precedes the first `*`, what lies between
    /// each two, and what follows the last (empty for a trailing `*`).
    parts: Vec<Box<[u8]>>,
}

impl Pattern {
    /// The pattern of a descriptor of `key` and `value`, if it is a wildcard.
    pub(crate) fn new(key: &str, value: &str) -> Option<Self> {
        let parts: Vec<Box<[u8]>> = if value.is_empty() {
            let literal = key.strip_suffix('*')?;
            vec![literal.as_bytes().into(), Box::default()]
        } else {
            if !value.contains('*') {
                return None;
            }
            let mut pieces = value.split('*');
            let first = pieces.next().unwrap_or_default();
            std::iter::once(format!("{key}_{first}").into_bytes().into_boxed_slice())
                .chain(pieces.map(|piece| piece.as_bytes().into()))
                .collect()
        };
        Some(Self { parts })
    }

    /// Whether `text` (a request entry's `key_value`) matches: it starts
    /// with the first part, ends with the last, and holds the others in
    /// order between them.
    fn matches(&self, text: &[u8]) -> bool {
        let Some((first, rest)) = self.parts.split_first() else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return false;
        };
        if text.len() < first.len() + last.len()
            || !text.starts_with(first)
            || !text.ends_with(last)
        {
            return false;
        }
        let mut between = &text[first.len()..text.len() - last.len()];
        for part in middle {
            if part.is_empty() {
                continue;
            }
            // The leftmost occurrence leaves the most room for the rest.
            match between
                .windows(part.len())
                .position(|window| window == &**part)
            {
                Some(at) => between = &between[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(key: &str, value: &str, request: &str) -> bool {
        Pattern::new(key, value)
            .expect("a wildcard")
            .matches(request.as_bytes())
    }

    #[test]
    fn a_trailing_star_matches_every_value_with_its_prefix() {
        assert!(matches("k", "foo*", "k_foo"));
        assert!(matches("k", "foo*", "k_foobar"));
        assert!(!matches("k", "foo*", "k_fo"));
        assert!(matches("k", "*", "k_"));
        assert!(matches("k", "*", "k_anything"));
        assert!(!matches("k", "*", "j_anything"));
        // Without a value, a key ending in `*` is a prefix of composite keys.
        assert!(matches("ab*", "", "abc_x"));
        assert!(matches("ab*", "", "ab_x"));
        assert!(!matches("ab*", "", "a_x"));
        // A `*` inside a key is literal.
        assert!(matches("a*b", "c*", "a*b_cd"));
        assert!(!matches("a*b", "c*", "axb_cd"));
        assert!(Pattern::new("a*b", "").is_none());
        assert!(Pattern::new("k", "v").is_none());
    }

    #[test]
    fn stars_anywhere_in_a_value_are_wildcards() {
        assert!(matches("k", "f*o", "k_fo"));
        assert!(matches("k", "f*o", "k_fxyzo"));
        assert!(!matches("k", "f*o", "k_fxyz"));
        assert!(!matches("k", "f*o", "k_xfo"));
        assert!(matches("k", "*.example.com", "k_api.example.com"));
        assert!(!matches("k", "*.example.com", "k_example.com"));
        assert!(matches("k", "a*b*c", "k_abc"));
        assert!(matches("k", "a*b*c", "k_a-b-b-c"));
        assert!(!matches("k", "a*b*c", "k_a-c-b"));
        assert!(matches("k", "a**c", "k_ac"));
        // The last part may not overlap the first.
        assert!(!matches("k", "ab*ba", "k_aba"));
        assert!(matches("k", "ab*ba", "k_abba"));
    }
}
