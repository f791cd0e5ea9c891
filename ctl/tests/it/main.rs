//! accordctl's integration tests, one binary: its offline commands end
//! to end (`simulate`, `demand`, `plan --demand`). The commands that ask
//! accordd or a BMC are tested beside them in daemon/tests/it, which
//! runs this binary from the same target directory.

mod demand;
mod simulate;
