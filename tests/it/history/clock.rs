//! Steps of the machine's wall clock, as a virtual machine resuming from a pause or syncing
//! its time makes them: needs root (`CAP_SYS_TIME`), and disturbs every process on the
//! machine that reads the wall clock, so only the history run that asks for them takes them,
//! alone (`.ci/run` runs it after the suite).

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Sets the wall clock `by` earlier (`back`) or later, keeping the time elapsed meanwhile;
/// why not, if it could not (this run needs root).
fn step(by: Duration, back: bool) -> Result<(), String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let to = if back { now - by } else { now + by };
    let output = Command::new("date")
        .args([
            "-u",
            "-s",
            &format!("@{}.{:09}", to.as_secs(), to.subsec_nanos()),
        ])
        .output()
        .map_err(|err| format!("date(1) did not run: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "the wall clock could not be set (this run needs CAP_SYS_TIME: root on a machine \
             or a VM, a container started with --cap-add SYS_TIME): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The wall clock stepped back by `by` for as long as it lives; stepped forward by as much
/// when dropped (on a panic too), so the machine ends as it began but for a few milliseconds.
pub(super) struct SteppedBack {
    by: Duration,
}

impl SteppedBack {
    pub(super) fn by(by: Duration) -> Self {
        step(by, true).unwrap_or_else(|why| panic!("{why}"));
        Self { by }
    }
}

impl Drop for SteppedBack {
    fn drop(&mut self) {
        // No panic here: during an unwind it would abort, leaving the clock back.
        if let Err(why) = step(self.by, false) {
            eprintln!("the wall clock was not stepped forward again: {why}");
        }
    }
}
