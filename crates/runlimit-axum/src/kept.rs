//! Layer constants kept for the life of the process.
//!
//! Every request a layer admits carries its fixed policies' metadata into the
//! [`RateLimitContext`](crate::RateLimitContext), and every response it lets
//! through carries the same `RateLimit-Policy` value. Shared behind a
//! reference count, each of those copies writes the count twice (taken, then
//! dropped), and every core serving the layer writes the same cache line. A
//! constant kept for the life of the process is copied as a pointer instead.
//!
//! Constants are interned: a layer built again with the same policies finds
//! the ones kept before, and an [`Interner`] keeps at most a fixed number of
//! distinct constants, so a program that builds layers from changing
//! configuration holds a bounded amount. Layers built past the bound keep
//! counted constants, which behave the same and cost the writes above.

use std::{
    collections::HashSet,
    fmt,
    hash::Hash,
    ops::Deref,
    sync::{Arc, LazyLock, Mutex, PoisonError},
};

/// A constant shared by a layer's requests: kept for the life of the process,
/// or, past an [`Interner`]'s bound and for per-request values, counted.
pub(crate) enum Kept<T: ?Sized + 'static> {
    Static(&'static T),
    Counted(Arc<T>),
}

impl<T: ?Sized> Clone for Kept<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Static(value) => Self::Static(value),
            Self::Counted(value) => Self::Counted(Arc::clone(value)),
        }
    }
}

impl<T: ?Sized> Deref for Kept<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Self::Static(value) => value,
            Self::Counted(value) => value,
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Kept<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// Distinct constants of one type, each kept once for the life of the process.
pub(crate) struct Interner<T: ?Sized + 'static> {
    kept: LazyLock<Mutex<HashSet<&'static T>>>,
    /// The most distinct constants this interner keeps.
    bound: usize,
}

impl<T: ?Sized + Eq + Hash + 'static> Interner<T> {
    /// An interner that keeps at most `bound` distinct constants.
    pub(crate) const fn new(bound: usize) -> Self {
        Self {
            kept: LazyLock::new(|| Mutex::new(HashSet::new())),
            bound,
        }
    }

    /// The kept constant equal to `value`, kept now if it is new and the
    /// bound allows; otherwise `value`, counted.
    pub(crate) fn keep(&self, value: Box<T>) -> Kept<T> {
        // A panic while the set is locked cannot leave it half-changed: an
        // insert either happened or did not.
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&existing) = kept.get(&*value) {
            return Kept::Static(existing);
        }
        if kept.len() >= self.bound {
            return Kept::Counted(Arc::from(value));
        }
        let leaked: &'static T = Box::leak(value);
        kept.insert(leaked);
        Kept::Static(leaked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_static<T: ?Sized>(kept: &Kept<T>) -> Option<*const T> {
        match kept {
            Kept::Static(value) => Some(*value as *const T),
            Kept::Counted(_) => None,
        }
    }

    #[test]
    fn equal_constants_share_one_kept_copy_up_to_the_bound() {
        static STRINGS: Interner<str> = Interner::new(2);
        let first = STRINGS.keep("\"a\";q=1;w=60".into());
        let again = STRINGS.keep("\"a\";q=1;w=60".into());
        assert_eq!(&*again, "\"a\";q=1;w=60");
        let first_address = is_static(&first).expect("kept");
        assert!(std::ptr::eq(
            first_address,
            is_static(&again).expect("found again")
        ));
        assert!(is_static(&STRINGS.keep("\"b\";q=1;w=60".into())).is_some());
        // The bound is reached: a third distinct value is counted, not kept,
        // and reads the same.
        let past = STRINGS.keep("\"c\";q=1;w=60".into());
        assert!(is_static(&past).is_none());
        assert_eq!(&*past, "\"c\";q=1;w=60");
        assert_eq!(&*past.clone(), "\"c\";q=1;w=60");
        // Those kept before are still found.
        assert!(std::ptr::eq(
            first_address,
            is_static(&STRINGS.keep("\"a\";q=1;w=60".into())).expect("still kept")
        ));
    }
}
