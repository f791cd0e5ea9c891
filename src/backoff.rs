//! Capped exponential backoff with full jitter, shared by everything in
//! Accord that retries a peer (the agent calling accordd, the Redfish client
//! calling BMCs). Pure: the caller seeds it and does the sleeping.

use std::time::Duration;

/// Capped exponential backoff with full jitter: each wait is uniform in
/// [0, min(max, initial·2^n)], so agents that lost the daemon together do
/// not come back together.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial_ms: u64,
    max_ms: u64,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    pub fn new(initial_ms: u64, max_ms: u64, seed: u64) -> Backoff {
        Backoff {
            initial_ms,
            max_ms,
            attempt: 0,
            rng: seed | 1,
        }
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The ceiling of the next wait, before jitter.
    pub fn ceiling(&self) -> Duration {
        let exp = self
            .initial_ms
            .saturating_mul(1u64 << self.attempt.min(32))
            .min(self.max_ms);
        Duration::from_millis(exp)
    }

    pub fn next_wait(&mut self) -> Duration {
        let ceiling = self.ceiling().as_millis() as u64;
        self.attempt = self.attempt.saturating_add(1);
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        Duration::from_millis(self.rng % (ceiling + 1))
    }
}
