//! For swdaq's tests only: a real XRootD server, never a mock. [`TestXrootd::start`] writes a
//! configuration exporting a temporary directory (`oss.localroot`) with adler32 checksums
//! (`xrootd.chksum adler32`) and starts `xrootd` on a free port, which the tests reach on
//! 127.0.0.1 only;
//! dropping it kills the server and removes the directory. The server can be stopped and
//! started again on the same port ([`TestXrootd::stop`], [`TestXrootd::restart`]), for tests
//! of transfers it interrupts.
//!
//! `xrootd` refuses to run as root: as root it runs as `nobody` (`-R nobody`), which then owns
//! the export. Where there is no `xrootd` on the `PATH` (`scripts/setup-xrootd.sh` installs
//! Debian's), or it cannot start, the test says why on one `SKIP` line and passes
//! ([`TestXrootd::start_or_skip`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest the server may take to listen.
const START_WAIT: Duration = Duration::from_secs(15);

pub struct TestXrootd {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl TestXrootd {
    /// A started server, or why there is none.
    pub fn start() -> Result<Self, String> {
        for program in ["xrootd", "xrdcp", "xrdfs"] {
            if !on_path(program) {
                return Err(format!(
                    "no {program} on the PATH: run scripts/setup-xrootd.sh (Debian's xrootd-server and xrootd-client)"
                ));
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("swdaq-xrootd-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        let export = dir.path().join("export");
        std::fs::create_dir(&export).map_err(|e| format!("cannot make the export: {e}"))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        // What the server exports, where, the checksum it computes, its port; clients from
        // this host only (xrootd listens on every interface and has no option to bind one).
        let config = format!(
            "all.export /\noss.localroot {}\nxrootd.chksum adler32\nxrd.port {port}\nxrd.allow host localhost\n",
            export.display()
        );
        std::fs::write(dir.path().join("xrootd.cfg"), config)
            .map_err(|e| format!("cannot write the configuration: {e}"))?;
        if is_root() {
            // The server runs as nobody: it must reach and write its files.
            let (uid, gid) = (65534, 65534);
            for p in [dir.path(), export.as_path()] {
                std::os::unix::fs::chown(p, Some(uid), Some(gid))
                    .map_err(|e| format!("cannot give {} to nobody: {e}", p.display()))?;
            }
        }
        let mut server = Self {
            dir,
            port,
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// [`TestXrootd::start`], or `None` after a `SKIP` line naming `test` and saying why.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        match Self::start() {
            Ok(server) => Some(server),
            Err(why) => {
                eprintln!("SKIP {test}: no XRootD server: {why}");
                None
            }
        }
    }

    /// `host:port`, as the client programs take it.
    pub fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `root://127.0.0.1:PORT/` followed by `path` (absolute: `//path` as XRootD writes it).
    pub fn url(&self, path: &str) -> String {
        format!("root://{}/{path}", self.server())
    }

    /// The directory the server exports: its `/x` is `export().join("x")`.
    pub fn export(&self) -> PathBuf {
        self.dir.path().join("export")
    }

    /// Writes `bytes` at the server's `path` behind its back (its directories made), owned by
    /// the server's user as its own files are: a file already there, or one damaged.
    pub fn write_behind(&self, path: &str, bytes: &[u8]) {
        let export = self.export();
        let file = export.join(path.trim_start_matches('/'));
        let owner = std::fs::metadata(&export).expect("the export is there");
        let mut made = Vec::new();
        let mut dir = file.parent();
        while let Some(d) = dir.filter(|d| !d.exists()) {
            made.push(d.to_path_buf());
            dir = d.parent();
        }
        std::fs::create_dir_all(file.parent().expect("under the export")).unwrap();
        std::fs::write(&file, bytes).unwrap();
        use std::os::unix::fs::MetadataExt;
        for p in made.iter().chain([&file]) {
            std::os::unix::fs::chown(p, Some(owner.uid()), Some(owner.gid())).unwrap();
        }
    }

    /// Kills the server (SIGKILL: as a crash or a network cut ends its connections).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on its port, and waits until it answers.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let d = self.dir.path();
        let mut c = Command::new("xrootd");
        if is_root() {
            c.args(["-R", "nobody"]);
        }
        c.arg("-c")
            .arg(d.join("xrootd.cfg"))
            .arg("-l")
            .arg(d.join("xrootd.log"))
            .arg("-s")
            .arg(d.join("xrootd.pid"))
            .arg("-a")
            .arg(d.join("adm"))
            .args(["-n", "swdaq-test"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| format!("cannot run xrootd: {e}"))?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("xrootd ended at once ({status}): {}", err.trim()));
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            if started.elapsed() > START_WAIT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "xrootd did not listen on 127.0.0.1:{} within {START_WAIT:?} (log in {})",
                    self.port,
                    self.log_path().display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's log, for a failing test's message.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("xrootd.log")
    }
}

impl Drop for TestXrootd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| Path::new(&dir).join(program).is_file())
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
