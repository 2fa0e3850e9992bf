//! Unit tests of the simulated disk.

use std::{io, path::Path};

use super::{FsCall, PowerLoss, SimFs};
use crate::fs::WalFs;

fn read_all(fs: &SimFs, path: &str) -> io::Result<Vec<u8>> {
    let file = fs.open(Path::new(path))?;
    let mut buf = vec![0u8; file.len_bytes()? as usize];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

fn names(fs: &SimFs, dir: &str) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = fs
        .list_dir(Path::new(dir))?
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

#[test]
fn power_loss_keeps_exactly_what_was_synced() -> io::Result<()> {
    let fs = SimFs::new(1);
    fs.create_dir(Path::new("/d"))?;
    fs.sync_dir(Path::new("/"))?;
    let a = fs.create_new(Path::new("/d/a"))?;
    a.write_all_at(b"synced", 0)?;
    a.sync_data()?;
    fs.sync_dir(Path::new("/d"))?;
    a.write_all_at(b" and not", 6)?;
    // Synced data but no directory fsync: the name is lost.
    let b = fs.create_new(Path::new("/d/b"))?;
    b.write_all_at(b"b", 0)?;
    b.sync_data()?;
    drop((a, b));

    fs.power_loss(PowerLoss::Strict);
    assert_eq!(names(&fs, "/d")?, ["a"]);
    assert_eq!(read_all(&fs, "/d/a")?, b"synced");
    Ok(())
}

#[test]
fn deletes_and_renames_wait_for_the_directory_fsync() -> io::Result<()> {
    let fs = SimFs::new(2);
    for name in ["/x", "/y"] {
        let file = fs.create_new(Path::new(name))?;
        file.write_all_at(name.as_bytes(), 0)?;
        file.sync_data()?;
    }
    fs.sync_dir(Path::new("/"))?;
    fs.remove_file(Path::new("/x"))?;
    fs.rename(Path::new("/y"), Path::new("/z"))?;
    assert_eq!(names(&fs, "/")?, ["z"]);
    fs.restart();
    assert_eq!(names(&fs, "/")?, ["z"], "a restart keeps unsynced changes");
    fs.power_loss(PowerLoss::Strict);
    assert_eq!(names(&fs, "/")?, ["x", "y"]);
    assert_eq!(read_all(&fs, "/y")?, b"/y");
    Ok(())
}

#[test]
fn a_new_directory_needs_its_parent_fsynced() -> io::Result<()> {
    let fs = SimFs::new(3);
    fs.create_dir(Path::new("/d"))?;
    let file = fs.create_new(Path::new("/d/f"))?;
    file.sync_data()?;
    fs.sync_dir(Path::new("/d"))?;
    fs.power_loss(PowerLoss::Strict);
    assert!(!fs.exists(Path::new("/d"))?);
    Ok(())
}

#[test]
fn torn_power_loss_keeps_a_prefix_of_unsynced_bytes() -> io::Result<()> {
    let mut lengths = Vec::new();
    for seed in 0..32 {
        let fs = SimFs::new(seed);
        let file = fs.create_new(Path::new("/f"))?;
        file.write_all_at(b"0123", 0)?;
        file.sync_data()?;
        fs.sync_dir(Path::new("/"))?;
        file.write_all_at(b"456789", 4)?;
        drop(file);
        fs.power_loss(PowerLoss::Torn);
        let bytes = read_all(&fs, "/f")?;
        assert!(b"0123456789".starts_with(&bytes) && bytes.len() >= 4);
        lengths.push(bytes.len());
    }
    lengths.sort_unstable();
    lengths.dedup();
    assert!(lengths.len() > 3, "seeds should tear at different points");
    Ok(())
}

#[test]
fn crash_point_stops_every_later_call_and_faults_fire_once() -> io::Result<()> {
    let fs = SimFs::new(4);
    let file = fs.create_new(Path::new("/f"))?;
    fs.fail_next(FsCall::SyncData, io::Error::other("EIO"));
    assert!(file.sync_data().is_err());
    file.sync_data()?;
    let before = fs.mutating_calls();
    fs.crash_after(1);
    file.write_all_at(b"a", 0)?;
    assert!(file.write_all_at(b"b", 1).is_err());
    assert!(fs.crashed());
    assert!(fs.list_dir(Path::new("/")).is_err(), "even reads fail");
    assert_eq!(fs.mutating_calls(), before + 2);
    fs.restart();
    assert!(file.len_bytes().is_err(), "handles go stale");
    assert_eq!(read_all(&fs, "/f")?, b"a");
    assert!(fs.journal().iter().any(|line| line.contains("CRASH")));
    Ok(())
}
