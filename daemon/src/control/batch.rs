//! The batching window that turns bursts of wake-ups into one round.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// Collects wake-ups (changes in demand, nodes, agents, BMCs, finished
/// power actions) into rounds: a round starts once `idle` passes without
/// a new wake-up, or `max` after the first, whichever is sooner.
#[derive(Debug, Clone, Copy)]
pub struct Batcher {
    pub idle: Duration,
    pub max: Duration,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

impl Batcher {
    /// Waits for the next batch; `None` when every sender is gone.
    pub async fn next<T>(&self, rx: &mut mpsc::Receiver<T>) -> Option<Vec<T>> {
        self.next_until(rx, None).await
    }

    /// As [`Batcher::next`], but returns what it has (perhaps nothing) at
    /// `deadline`: the loop's tick. Nothing received is ever dropped, so
    /// wake-ups can carry results.
    pub async fn next_until<T>(
        &self,
        rx: &mut mpsc::Receiver<T>,
        deadline: Option<Instant>,
    ) -> Option<Vec<T>> {
        let first = match deadline {
            Some(d) => match tokio::time::timeout_at(d, rx.recv()).await {
                Ok(first) => first?,
                Err(_) => return Some(Vec::new()),
            },
            None => rx.recv().await?,
        };
        let started = Instant::now();
        let mut batch = vec![first];
        loop {
            let mut end = (Instant::now() + self.idle).min(started + self.max);
            if let Some(d) = deadline {
                end = end.min(d);
            }
            match tokio::time::timeout_at(end, rx.recv()).await {
                Ok(Some(item)) => batch.push(item),
                Ok(None) | Err(_) => return Some(batch),
            }
        }
    }
}
