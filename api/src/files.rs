//! The files Accord's programs are pointed at (configurations, fleets,
//! hardware models, traces, token and credential files, captures) are
//! read and written one way: a read takes only a regular file, opened
//! without blocking (a FIFO cannot hang it, a character device cannot
//! feed it forever), and at most `limit` bytes, whatever the size said;
//! a write goes to a new file made beside the target and renamed over it,
//! so a symlink planted at the target is replaced, never followed (a
//! capture run as root cannot be made to overwrite `/etc/shadow`).

use std::io::{Error, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Limits for the kinds of file read.
pub mod limit {
    /// A TOML configuration, a BMC inventory, a fleet file.
    pub const CONFIG: u64 = 4 << 20;
    /// A token, password or credential file.
    pub const SECRET: u64 = 64 << 10;
    /// A hardware model, hwloc XML, an NVML snapshot, demand manifests.
    pub const MODEL: u64 = 64 << 20;
}

fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// At most `limit` bytes of the regular file at `path` (symlinks to one
/// are followed: admins link configuration files). Anything else, or a
/// file larger than `limit`, is an `InvalidInput` error saying what.
pub fn read(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{}, not a regular file", kind(meta.file_type())),
        ));
    }
    let too_large = |len: u64| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{len} bytes, over the limit of {limit} bytes"),
        )
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_to_string(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read(path, limit)?)
        .map_err(|e| Error::new(ErrorKind::InvalidData, format!("not UTF-8: {e}")))
}

/// Whether another user could swap what is written in `dir`: it must be
/// a directory not writable by every user unless sticky (as /tmp is: there
/// others cannot rename or remove what is ours), owned by root or by
/// whoever owns `made` (the file just made there: this process's user).
/// The file itself is never followed (below).
fn check_dir(dir: &Path, made: Option<&std::fs::File>) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{}: {}, not a directory",
                dir.display(),
                kind(meta.file_type())
            ),
        ));
    }
    if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{}: writable by every user and not sticky: another user could swap what is \
                 written there",
                dir.display()
            ),
        ));
    }
    if let Some(made) = made {
        let me = made.metadata()?.uid();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{}: owned by uid {}, not by this user (uid {me}) or root: its owner \
                     could swap what is written there",
                    dir.display(),
                    meta.uid()
                ),
            ));
        }
    }
    Ok(())
}

/// Writes `contents` to `path` by making a new file beside it
/// (`O_CREAT|O_EXCL`, which never follows a symlink) and renaming it over
/// `path` (which replaces a symlink there rather than writing through it),
/// in a directory no other user can swap it in ([`check_dir`]).
pub fn write_replacing(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    check_dir(&dir, None)?;
    let name = path
        .file_name()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "no file name"))?;
    let mut attempt = 0u32;
    let (tmp, mut file) = loop {
        let tmp = dir.join(format!(
            ".{}.{}.{attempt}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let written = check_dir(&dir, Some(&file))
        .and_then(|()| file.write_all(contents))
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "hello").unwrap();
        assert_eq!(read_to_string(&file, 5).unwrap(), "hello");
        let e = read(&file, 4).unwrap_err();
        assert_eq!(e.to_string(), "5 bytes, over the limit of 4 bytes");
        // A FIFO with no writer: refused at once (a plain open would
        // block until a writer came).
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read(&fifo, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "a FIFO, not a regular file");
        // A character device that never ends.
        let e = read(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "a character device, not a regular file");
        let e = read(dir.path(), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let target = out.join("figures.json");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        write_replacing(&target, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}");
        assert!(!std::fs::symlink_metadata(&target).unwrap().is_symlink());
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    }

    #[test]
    fn a_directory_another_user_could_swap_files_in_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = write_replacing(&open.join("f"), b"x").unwrap_err();
        assert!(
            e.to_string()
                .contains("writable by every user and not sticky"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_dir(&open).unwrap().count(),
            0,
            "nothing written"
        );
        // Sticky, as /tmp: others cannot rename or remove what is ours.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        write_replacing(&open.join("f"), b"x").unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = write_replacing(&file.join("f"), b"x").unwrap_err();
        assert!(
            e.to_string().contains("not a directory") || e.kind() == ErrorKind::NotADirectory,
            "{e}"
        );
        // Owned by another user (only root can make one here; CI runs as
        // root).
        let mine = std::fs::metadata(dir.path().join("file")).unwrap();
        if std::os::unix::fs::MetadataExt::uid(&mine) == 0 {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = write_replacing(&theirs.join("f"), b"x").unwrap_err();
            assert!(e.to_string().contains("owned by uid 65534"), "{e}");
            assert_eq!(
                std::fs::read_dir(&theirs).unwrap().count(),
                0,
                "nothing left"
            );
        }
    }
}
