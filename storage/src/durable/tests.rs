use std::io::Write;
use std::sync::Arc;

use super::*;

const STEPS: [Step; 6] = [
    Step::CreateDirs,
    Step::CreateTemp,
    Step::Write,
    Step::SyncFile,
    Step::Rename,
    Step::SyncDir,
];

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn write_bytes(bytes: &[u8]) -> impl FnOnce(&mut BufWriter<File>) -> Result<()> + '_ {
    move |w| {
        w.write_all(bytes)
            .map_err(|e| io_error(Path::new("test"), e))?;
        Ok(())
    }
}

#[test]
fn durable_replace_leaves_no_temp_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("file");
    replace_file_durably(&path, write_bytes(b"one")).unwrap();
    replace_file_durably(&path, write_bytes(b"two")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(names_in(path.parent().unwrap()), ["file"]);
    replace_file_atomically(&path, write_bytes(b"three")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"three");
    assert_eq!(names_in(path.parent().unwrap()), ["file"]);
}

#[test]
fn steps_run_in_the_order_that_survives_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    let mut seen = Vec::new();
    replace(
        &path,
        Durability::Durable,
        write_bytes(b"new"),
        &mut |step| {
            seen.push(step);
            Ok(())
        },
    )
    .unwrap();
    // The file's data is on disk before its name points at it, and the name is on disk
    // before the caller hears "done".
    assert_eq!(seen, STEPS);
}

/// A crash (the process stops, no clean-up runs) at any step leaves, at the target's
/// name, the old content or the complete new one; never a partial or empty file.
#[test]
fn crash_at_any_step_leaves_old_or_new_content_never_partial() {
    let new = vec![7u8; 3 * WRITE_BUFFER_BYTES + 5];
    for existed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        if existed {
            fs::write(&path, b"old").unwrap();
        }
        let mut checked = 0;
        replace(&path, Durability::Durable, write_bytes(&new), &mut |step| {
            // What a crash at this point leaves at the final name.
            match fs::read(&path) {
                Ok(found) => assert!(
                    found == b"old" || found == new,
                    "partial content at the target before {step:?}"
                ),
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::NotFound);
                    assert!(!existed, "old content lost before {step:?}");
                }
            }
            checked += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(checked, STEPS.len());
        assert_eq!(fs::read(&path).unwrap(), new);
    }
}

/// An error at any step (full disk, EIO, a failing writer) leaves the old content or
/// nothing at the target, or the new content once the rename happened; the temporary
/// file is removed.
#[test]
fn failure_at_any_step_leaves_old_content_or_nothing_and_no_temp_file() {
    for failing in STEPS {
        for existed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("file");
            if existed {
                fs::write(&path, b"old").unwrap();
            }
            let outcome: Result<()> = replace(
                &path,
                Durability::Durable,
                write_bytes(b"new content"),
                &mut |step| {
                    if step == failing {
                        Err(io::Error::other("injected"))
                    } else {
                        Ok(())
                    }
                },
            );
            assert!(outcome.is_err(), "failure at {failing:?} is reported");
            let found = fs::read(&path).ok();
            let expected: Option<&[u8]> = if failing > Step::Rename {
                Some(b"new content")
            } else if existed {
                Some(b"old")
            } else {
                None
            };
            assert_eq!(found.as_deref(), expected, "failure at {failing:?}");
            let expected_names: &[&str] = if expected.is_some() { &["file"] } else { &[] };
            assert_eq!(names_in(dir.path()), expected_names, "at {failing:?}");
        }
    }
}

#[test]
fn failing_writer_leaves_old_content_and_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    fs::write(&path, b"old").unwrap();
    let outcome: Result<()> = replace_file_durably(&path, |w| {
        w.write_all(b"half").unwrap();
        Err(Error::Catalog("writer gave up".into()))
    });
    assert!(matches!(outcome, Err(Error::Catalog(_))));
    assert_eq!(fs::read(&path).unwrap(), b"old");
    assert_eq!(names_in(dir.path()), ["file"]);
}

#[test]
fn crash_leftover_temp_file_is_overwritten_or_swept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    // A crash left a partial temporary file of `file` and one of `other`.
    fs::write(temp_path(&path), b"par").unwrap();
    fs::write(temp_path(&dir.path().join("other")), b"x").unwrap();
    replace_file_durably(&path, write_bytes(b"whole")).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"whole");
    assert_eq!(names_in(dir.path()), ["file", "other.tmp"]);

    // The sweep spares the temporary file of a target being written.
    let busy = Turn::take(&dir.path().join("other"));
    assert!(remove_stale_temp_files(dir.path()).unwrap().is_empty());
    drop(busy);
    let removed = remove_stale_temp_files(dir.path()).unwrap();
    assert_eq!(removed, [dir.path().join("other.tmp")]);
    assert_eq!(names_in(dir.path()), ["file"]);
}

#[test]
fn concurrent_writers_of_one_target_never_mix_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("file"));
    let writers = 4u8;
    let rounds = 20;
    let threads: Vec<_> = (0..writers)
        .map(|id| {
            let path = path.clone();
            std::thread::spawn(move || {
                let content = vec![id; 256 * 1024];
                for _ in 0..rounds {
                    replace_file_atomically(&path, write_bytes(&content)).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let found = fs::read(&*path).unwrap();
    assert_eq!(found.len(), 256 * 1024);
    assert!(
        found.iter().all(|b| *b == found[0]),
        "bytes of two writers mixed"
    );
    assert_eq!(names_in(dir.path()), ["file"]);
}

#[test]
fn install_moves_a_staged_file_into_new_directories() {
    let dir = tempfile::tempdir().unwrap();
    let staged = dir.path().join("incoming.part");
    fs::write(&staged, b"parquet").unwrap();
    let target = dir.path().join("data").join("db").join("x.parquet");
    install_file_durably(&staged, &target).unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"parquet");
    assert!(!staged.exists());
}

#[test]
fn install_failure_before_the_rename_leaves_the_target_absent() {
    for failing in [Step::SyncFile, Step::CreateDirs, Step::Rename] {
        let dir = tempfile::tempdir().unwrap();
        let staged = dir.path().join("incoming.part");
        fs::write(&staged, b"parquet").unwrap();
        let target = dir.path().join("data").join("x.parquet");
        let outcome = install(&staged, &target, &mut |step| {
            if step == failing {
                Err(io::Error::other("injected"))
            } else {
                Ok(())
            }
        });
        assert!(outcome.is_err());
        assert!(!target.exists(), "failure at {failing:?}");
        assert_eq!(fs::read(&staged).unwrap(), b"parquet");
    }
}

#[test]
fn temp_names_map_back_to_their_targets() {
    let target = Path::new("/d/00000000000000000001-00000000000000000002.parquet");
    let tmp = temp_path(target);
    assert_eq!(
        tmp,
        Path::new("/d/00000000000000000001-00000000000000000002.parquet.tmp")
    );
    assert_eq!(target_of_temp(&tmp).as_deref(), Some(target));
    assert_eq!(target_of_temp(target), None);
    assert_eq!(target_of_temp(Path::new("/d/.tmp")), None);
}
