//! The test process's scratch folder: every file a test writes for a process it starts (a
//! seed, a schema map, a log) goes into `$TMPDIR/partner-api-tests-<pid>`. A test binary has
//! no hook at its exit, so each run, when it first needs the folder, removes the folders (and
//! the loose `partner-api-<pid>-...` files of earlier versions) that runs whose process has
//! exited left behind.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FOLDER_PREFIX: &str = "partner-api-tests-";

/// `name` in this process's scratch folder (made on first use).
pub fn scratch_path(name: &str) -> PathBuf {
    static FOLDER: OnceLock<PathBuf> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let temp = std::env::temp_dir();
            sweep(&temp);
            let folder = temp.join(format!("{FOLDER_PREFIX}{}", std::process::id()));
            std::fs::create_dir_all(&folder).unwrap();
            folder
        })
        .join(name)
}

/// Removes what exited test processes left in `temp`: this version's folders and the loose
/// files of the versions before it. Only where `/proc` says which processes live.
fn sweep(temp: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid = if let Some(pid) = name.strip_prefix(FOLDER_PREFIX) {
            pid
        } else if let Some(rest) = name.strip_prefix("partner-api-") {
            // partner-api-<pid>-<name>, partner-api-{pg-seed,soak,baseline}-<pid>[.json]
            let rest = rest
                .strip_prefix("pg-seed-")
                .or_else(|| rest.strip_prefix("soak-"))
                .or_else(|| rest.strip_prefix("baseline-"))
                .unwrap_or(rest);
            rest.split(['-', '.']).next().unwrap_or("")
        } else {
            continue;
        };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if proc.join(pid).exists() {
            continue;
        }
        let path = entry.path();
        // Another run's sweep may remove it first: either way it is gone.
        let _ = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}
