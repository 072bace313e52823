//! Per-policy state found by the policy's name on every check, without a
//! shared lock on the way: a map behind a `RwLock` that each thread reads
//! through a handful of entries it keeps itself.
//!
//! Every check counts into its policy's counters (the Prometheus series,
//! the status page's last minute). Looking them up in the shared map took
//! its read lock, whose counter the two cores passed back and forth on
//! every check, and hashed the name with SipHash; a thread that asks for
//! the policies it asked for last finds them in its own short list.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// How many entries each thread keeps at hand, of every map together.
const KEPT_PER_THREAD: usize = 8;

/// An entry a thread keeps: the id of its map, the map's generation when
/// it was kept, its name, the entry.
type Kept = (u64, u64, Box<str>, Arc<dyn Any + Send + Sync>);

thread_local! {
    /// The entries this thread used last, newest first.
    static RECENT: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

/// A `T` per name, created on first use and kept until the name is
/// [`remove`](ByName::remove)d (the names are the configuration's
/// policies, so it stays as small as the configuration in force).
pub(crate) struct ByName<T> {
    /// Tells this map's entries apart in each thread's list.
    id: u64,
    /// Changed by each removal: what a thread kept before it is not used
    /// again, so a name removed and made again is found afresh.
    generation: AtomicU64,
    shared: RwLock<HashMap<Box<str>, Arc<T>>>,
}

impl<T> Default for ByName<T> {
    fn default() -> ByName<T> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        ByName {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            shared: RwLock::default(),
        }
    }
}

impl<T: Send + Sync + 'static> ByName<T> {
    /// Run `with` on the entry of `name`, made by `create` if it has none.
    pub(crate) fn with<R>(
        &self,
        name: &str,
        create: impl FnOnce(&str) -> T,
        with: impl FnOnce(&T) -> R,
    ) -> R {
        // The entry is used where it is kept: cloning its `Arc` would bump a
        // count shared by every thread.
        let generation = self.generation.load(Ordering::Acquire);
        let with = match RECENT.with(|recent| {
            let Ok(recent) = recent.try_borrow() else {
                return Err(with);
            };
            let kept = recent
                .iter()
                .find(|(map, kept_in, kept, _)| {
                    *map == self.id && *kept_in == generation && **kept == *name
                })
                .and_then(|(_, _, _, entry)| entry.downcast_ref::<T>());
            match kept {
                Some(entry) => Ok(with(entry)),
                None => Err(with),
            }
        }) {
            Ok(result) => return result,
            Err(with) => with,
        };
        let entry = self.get_or_create(name, create);
        let result = with(&entry);
        RECENT.with(|recent| {
            // Only a `with` that itself looks up a name holds the list now;
            // its entry is then simply not kept.
            if let Ok(mut recent) = recent.try_borrow_mut() {
                // What this thread kept of an earlier generation of this
                // map is never used again.
                recent.retain(|(map, kept_in, _, _)| *map != self.id || *kept_in == generation);
                if recent.len() == KEPT_PER_THREAD {
                    recent.pop();
                }
                recent.insert(0, (self.id, generation, name.into(), entry));
            }
        });
        result
    }

    /// The entry of `name` from the shared map, made by `create` if none.
    pub(crate) fn get_or_create(&self, name: &str, create: impl FnOnce(&str) -> T) -> Arc<T> {
        // A poisoned lock only means a panic elsewhere mid-insert; the map
        // itself is still whole.
        if let Some(found) = self
            .shared
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
        {
            return found.clone();
        }
        self.shared
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(name.into())
            .or_insert_with(|| Arc::new(create(name)))
            .clone()
    }

    /// Forget `name`: its entry leaves the shared map, and no thread uses
    /// what it kept of this map before (the generation changes), so a use
    /// of `name` after this makes a new entry. A use racing the removal
    /// may still reach the old entry, once.
    pub(crate) fn remove(&self, name: &str) -> Option<Arc<T>> {
        let removed = self
            .shared
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// The entry of `name`, if it has one (not made, not kept).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) fn get(&self, name: &str) -> Option<Arc<T>> {
        self.shared
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn each_name_has_one_entry_across_threads_and_maps_stay_apart() {
        let first: Arc<ByName<AtomicUsize>> = Arc::default();
        let second: ByName<AtomicUsize> = ByName::default();
        let created = Arc::new(AtomicUsize::new(0));
        let count = |map: &ByName<AtomicUsize>, name: &str| {
            let created = created.clone();
            map.with(
                name,
                move |_| {
                    created.fetch_add(1, Ordering::Relaxed);
                    AtomicUsize::new(0)
                },
                |entry| entry.fetch_add(1, Ordering::Relaxed),
            );
        };
        // More names than a thread keeps: the ones pushed out are found
        // again in the shared map, not made twice.
        for _ in 0..3 {
            for name in 0..(KEPT_PER_THREAD + 4) {
                count(&first, &format!("p{name}"));
            }
            count(&second, "p0");
        }
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let first = first.clone();
                let count_created = created.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        first.with(
                            "p0",
                            |_| {
                                count_created.fetch_add(1, Ordering::Relaxed);
                                AtomicUsize::new(0)
                            },
                            |entry| entry.fetch_add(1, Ordering::Relaxed),
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(created.load(Ordering::Relaxed), KEPT_PER_THREAD + 4 + 1);
        assert_eq!(first.get("p0").unwrap().load(Ordering::Relaxed), 3 + 20);
        assert_eq!(first.get("p11").unwrap().load(Ordering::Relaxed), 3);
        assert_eq!(second.get("p0").unwrap().load(Ordering::Relaxed), 3);
        assert!(second.get("p1").is_none());
    }

    /// A removed name is gone from the map and from what this thread kept:
    /// used again, it is a new entry, counted from zero.
    #[test]
    fn a_removed_name_is_made_afresh_even_where_a_thread_kept_it() {
        let map: ByName<AtomicUsize> = ByName::default();
        let count = |name: &str| {
            map.with(
                name,
                |_| AtomicUsize::new(0),
                |entry| entry.fetch_add(1, Ordering::Relaxed) + 1,
            )
        };
        assert_eq!((count("p"), count("p"), count("q")), (1, 2, 1));
        assert_eq!(map.remove("p").unwrap().load(Ordering::Relaxed), 2);
        assert!(map.get("p").is_none());
        assert_eq!(count("p"), 1, "not the entry this thread kept");
        assert_eq!(count("q"), 2, "another name's entry stays");
        assert!(map.remove("absent").is_none());
    }
}
