//! Loopback ports for the children a test starts (accordd, BMC emulators,
//! etcd, the apiserver), which bind them themselves.
//!
//! A port is bound here, released, and bound again by the child, so two
//! things can take it in between; both are closed off:
//! - an outgoing connection's source port: the port is drawn below Linux's
//!   ephemeral range (32768–60999), which the kernel never hands out that
//!   way (`ip_local_port_range`);
//! - another world in the same test binary (the `worlds` binary runs two at
//!   once): a port handed out here is never handed out again by this
//!   process.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;

const LOW: u16 = 20_000;
const HIGH: u16 = 32_000;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port no one listens on, never handed out before by this
/// process; an error after 1,000 tries.
pub fn free_port() -> Result<u16, String> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let port = LOW + (h.finish() % u64::from(HIGH - LOW)) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return Ok(port);
        }
    }
    Err(format!("no free port in {LOW}..{HIGH} after 1000 tries"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(ports.iter().all(|p| (LOW..HIGH).contains(p)), "{ports:?}");
    }
}
