//! For swdaq's tests only: a real PostgreSQL server, never a mock. [`TestPostgres::start`]
//! makes a cluster with `initdb` in a temporary directory and starts it with `pg_ctl`,
//! listening on 127.0.0.1 at a free port only (its Unix socket in that directory, trust
//! authentication for every local connection); dropping it stops the server (`pg_ctl stop -m
//! immediate`) and removes the directory, a failing test's too.
//!
//! The server's programs are looked for on the `PATH`, then in Debian's
//! `/usr/lib/postgresql/VERSION/bin` (the `postgresql` package keeps them off the `PATH`;
//! `scripts/setup-postgresql.sh` installs it). `initdb` refuses to run as root, so as root the
//! cluster belongs to the `postgres` system user the package makes, and its programs run as
//! that user. Where there are no programs or the server cannot start, the test says why on one
//! `SKIP` line and passes ([`TestPostgres::start_or_skip`]).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The cluster's superuser, who owns every database the tests make.
const SUPERUSER: &str = "swdaq";

/// The longest `pg_ctl` waits for the server to accept connections, or to stop.
const PG_CTL_WAIT: Duration = Duration::from_secs(30);

/// A running PostgreSQL server of a test's own.
pub struct TestPostgres {
    /// Holds the cluster, the socket and the server's log; removed after the server stops.
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Root's tests run the server's programs as the `postgres` user: its uid and gid.
    owner: Option<(u32, u32)>,
    port: u16,
    databases_made: AtomicUsize,
}

impl TestPostgres {
    /// A started server, or why there is none.
    pub fn start() -> Result<Self, String> {
        let bin = server_programs().ok_or(
            "no PostgreSQL server programs (initdb, pg_ctl) on the PATH or in /usr/lib/postgresql/*/bin: run scripts/setup-postgresql.sh",
        )?;
        let owner = if is_root() {
            Some(postgres_user().ok_or(
                "running as root, which initdb refuses, and there is no `postgres` user to run the server as",
            )?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("swdaq-pg-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("cannot give {} to postgres: {e}", dir.path().display()))?;
        }
        let server = Self {
            dir,
            bin,
            owner,
            port: free_port()?,
            databases_made: AtomicUsize::new(0),
        };
        server.init_and_start()?;
        Ok(server)
    }

    /// [`TestPostgres::start`], or `None` after a `SKIP` line naming `test` and saying why.
    pub fn start_or_skip(test: &str) -> Option<Self> {
        match Self::start() {
            Ok(server) => Some(server),
            Err(why) => {
                eprintln!("SKIP {test}: no PostgreSQL server: {why}");
                None
            }
        }
    }

    /// A new, empty database; its URL (no password: trust authentication).
    pub fn create_database(&self) -> Result<String, String> {
        let n = self.databases_made.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("registry_{n}");
        let mut client = postgres::Config::new()
            .host("127.0.0.1")
            .port(self.port)
            .user(SUPERUSER)
            .dbname("postgres")
            .connect_timeout(PG_CTL_WAIT)
            .connect(postgres::NoTls)
            .map_err(|e| format!("cannot connect to the test server: {e}"))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(|e| format!("cannot create database {name}: {e}"))?;
        Ok(format!(
            "postgresql://{SUPERUSER}@127.0.0.1:{}/{name}",
            self.port
        ))
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn init_and_start(&self) -> Result<(), String> {
        let data = self.data();
        self.run(
            "initdb",
            &[
                "--pgdata".as_ref(),
                data.as_os_str(),
                "--username".as_ref(),
                SUPERUSER.as_ref(),
                "--auth=trust".as_ref(),
                "--no-locale".as_ref(),
                "--encoding=UTF8".as_ref(),
                // A test's cluster need not survive a power cut.
                "--no-sync".as_ref(),
            ],
        )?;
        // In the cluster's own configuration rather than on pg_ctl's command line, which
        // goes through a shell.
        let settings = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            self.port,
            self.dir.path().display()
        );
        append(&data.join("postgresql.conf"), &settings)?;
        let wait = PG_CTL_WAIT.as_secs().to_string();
        let log = self.log();
        self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "--pgdata".as_ref(),
                data.as_os_str(),
                "--log".as_ref(),
                log.as_os_str(),
                "--wait".as_ref(),
                "--timeout".as_ref(),
                wait.as_ref(),
            ],
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            format!("{e}\nits log:\n{log}")
        })
    }

    /// One of the server's programs, as the cluster's owner, waited for; an error says
    /// what it printed.
    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        let mut command = Command::new(self.bin.join(program));
        command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        let out = command
            .output()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{program} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let data = self.data();
        // No pid file: no server was started (initdb or the start failed), none to stop.
        if !data.join("postmaster.pid").exists() {
            return;
        }
        let wait = PG_CTL_WAIT.as_secs().to_string();
        // Immediate: the cluster is thrown away, nothing of it need be written.
        if let Err(e) = self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "--pgdata".as_ref(),
                data.as_os_str(),
                "--mode=immediate".as_ref(),
                "--wait".as_ref(),
                "--timeout".as_ref(),
                wait.as_ref(),
            ],
        ) {
            eprintln!("the test's PostgreSQL server did not stop: {e}");
        }
    }
}

/// The directory holding `initdb` and `pg_ctl`: the `PATH`'s, else the newest of Debian's.
fn server_programs() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| has_both(dir));
    on_path.or_else(|| {
        std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version: u32 = entry.file_name().to_str()?.parse().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .filter(|(_, bin)| has_both(bin))
            .max_by_key(|(version, _)| *version)
            .map(|(_, bin)| bin)
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The `postgres` system user's uid and gid.
fn postgres_user() -> Option<(u32, u32)> {
    // SAFETY: the name is a NUL-terminated literal; the entry getpwnam returns (static,
    // overwritten by the next call) is read at once, on this thread, before any other call.
    unsafe {
        let entry = libc::getpwnam(c"postgres".as_ptr());
        (!entry.is_null()).then(|| ((*entry).pw_uid, (*entry).pw_gid))
    }
}

/// A TCP port on 127.0.0.1 free at the moment of asking (the server binds it next).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot add to {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_server_takes_queries_and_is_gone_with_its_directory_when_dropped() {
        let Some(server) = TestPostgres::start_or_skip("swdaq-test-postgres") else {
            return;
        };
        let url = server.create_database().unwrap();
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let row = client.query_one("SELECT 40 + 2", &[]).unwrap();
        assert_eq!(row.get::<_, i32>(0), 42);
        assert_ne!(
            server.create_database().unwrap(),
            url,
            "a new one each time"
        );
        drop(client);
        let (dir, port) = (server.dir.path().to_path_buf(), server.port);
        drop(server);
        assert!(!dir.exists());
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the server is stopped"
        );
    }
}
