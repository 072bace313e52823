//! The last store error this instance met, for the engineer on call: an
//! outage that only clients' checks met, between two looks at the status
//! page, is still told at the next look.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::StoreError;

#[derive(Default)]
pub(super) struct LastError(Mutex<Option<(String, Instant)>>);

impl LastError {
    /// Written on the failure path only. A caller that finds the slot
    /// taken leaves it: another error of the same moment is being written,
    /// and waiting for it would queue every failing check behind one lock.
    pub(super) fn record(&self, error: &StoreError) {
        if let Ok(mut last) = self.0.try_lock() {
            *last = Some((error.to_string(), Instant::now()));
        }
    }

    /// Its text and how long ago it was met; `None` before the first.
    pub(super) fn get(&self) -> Option<(String, Duration)> {
        let last = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        last.as_ref()
            .map(|(message, at)| (message.clone(), at.elapsed()))
    }
}
