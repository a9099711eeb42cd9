//! The test process's scratch folder: every file a test writes for a process it starts (a
//! seed, a schema map, a log) goes into `$TMPDIR/partner-api-tests-<pid>`. A test binary has
//! no hook at its exit, so each run, when it first needs the folder, removes the folders that
//! runs whose process has exited left behind.

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

/// Removes the scratch folders in `temp` of test processes that have exited: folders named
/// as [`scratch_path`] names them (not a link, nor a file), whose pid `/proc` does not know.
/// Nothing where there is no `/proc` to ask.
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
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(FOLDER_PREFIX))
        else {
            continue;
        };
        let is_folder = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if !is_folder || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if !proc.join(pid).exists() {
            // Another run's sweep may remove it first, or it is another user's: either way
            // it is not ours to keep.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
