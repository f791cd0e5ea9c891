//! The lab's integration tests, one binary: replicas with a stand-in
//! accordd, and the stand-ins' objects on the real apiserver and scheduler.

mod ha;
mod upstream;
