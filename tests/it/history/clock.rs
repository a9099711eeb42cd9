//! Steps of the machine's wall clock, as a virtual machine resuming from a pause or syncing
//! its time makes them: needs root (`CAP_SYS_TIME`), and disturbs every process on the
//! machine that reads the wall clock, so only the history run that asks for them takes them,
//! alone (`.ci/run` runs it after the suite).

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Sets the wall clock `by` earlier (`back`) or later, keeping the time elapsed meanwhile.
fn step(by: Duration, back: bool) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let to = if back { now - by } else { now + by };
    let output = Command::new("date")
        .args([
            "-u",
            "-s",
            &format!("@{}.{:09}", to.as_secs(), to.subsec_nanos()),
        ])
        .output()
        .expect("run date(1)");
    assert!(
        output.status.success(),
        "the wall clock could not be set (this run needs root): {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// The wall clock stepped back by `by` for as long as it lives; stepped forward by as much
/// when dropped (on a panic too), so the machine ends as it began but for a few milliseconds.
pub(super) struct SteppedBack {
    by: Duration,
}

impl SteppedBack {
    pub(super) fn by(by: Duration) -> Self {
        step(by, true);
        Self { by }
    }
}

impl Drop for SteppedBack {
    fn drop(&mut self) {
        step(self.by, false);
    }
}
