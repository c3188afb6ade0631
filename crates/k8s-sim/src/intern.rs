//! Shares identical object bodies between objects.
//!
//! A fleet benchmark puts the same manifests on every cluster: 600,000 objects of
//! ~1 KiB would hold ~600 MB, but only a few hundred distinct bodies exist. Stored
//! objects keep an `Arc<str>` of their body (everything but metadata), interned here.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// A set of shared strings; entries no object uses any more are dropped from time to
/// time (when the set has doubled since the last sweep), so memory stays bounded by
/// the live bodies.
#[derive(Debug, Default)]
pub struct Interner {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    set: HashSet<Arc<str>>,
    sweep_at: usize,
}

impl Interner {
    const MIN_SWEEP: usize = 1024;

    /// The shared copy of `s`.
    pub fn intern(&self, s: &str) -> Arc<str> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = st.set.get(s) {
            return found.clone();
        }
        if st.set.len() >= st.sweep_at.max(Self::MIN_SWEEP) {
            st.set.retain(|e| Arc::strong_count(e) > 1);
            st.sweep_at = st.set.len() * 2;
        }
        let shared: Arc<str> = Arc::from(s);
        st.set.insert(shared.clone());
        shared
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_allocation() {
        let i = Interner::default();
        let (a, b) = (i.intern("{\"data\":1}"), i.intern("{\"data\":1}"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.intern("other")));
    }

    #[test]
    fn unused_entries_are_swept() {
        let i = Interner::default();
        let kept = i.intern("kept");
        for n in 0..5000 {
            drop(i.intern(&n.to_string()));
        }
        assert!(i.len() <= 2 * Interner::MIN_SWEEP, "{}", i.len());
        assert!(Arc::ptr_eq(&kept, &i.intern("kept")));
    }
}
