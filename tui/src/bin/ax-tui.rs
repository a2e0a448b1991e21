//! `ax-tui`: the ax operations console.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use ax_clients::console::state::{App, Event};
use ax_clients::console::{net, run};
use ax_protocol::client::SocketChoice;
use clap::Parser;
use crossterm::event::{Event as TermEvent, EventStream, KeyEventKind};
use futures_util::StreamExt;

#[derive(Parser, Debug)]
#[command(name = "ax-tui", version, about = "The ax operations console")]
struct Args {
    /// The daemon's socket (default: $AX_SOCKET, else the XDG/system place).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Start a private axd on the shipped examples (config/jobs.d), trigger
    /// some DAGs, open the console, and stop that daemon on quit.
    #[arg(long)]
    demo: bool,
    /// With --demo: the folder holding jobs.d (default: ./config).
    #[arg(long, requires = "demo")]
    config_dir: Option<PathBuf>,
}

struct Demo {
    child: std::process::Child,
    dir: PathBuf,
}

impl Drop for Demo {
    /// The demo's daemon stops with its jobs (SIGUSR2, as `ax shutdown
    /// --stop-jobs`): nothing of the demo outlives the console.
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGUSR2,
        );
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_config_dir(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d);
    }
    let mut candidates = vec![PathBuf::from("config")];
    if let Ok(exe) = std::env::current_exe()
        && let Some(root) = exe.parent().and_then(Path::parent).and_then(Path::parent)
    {
        candidates.push(root.join("config"));
    }
    candidates
        .into_iter()
        .find(|c| c.join("jobs.d").is_dir())
        .context("cannot find config/jobs.d; run from the repository root or pass --config-dir")
}

fn start_demo(config_dir: Option<PathBuf>) -> anyhow::Result<(Demo, PathBuf)> {
    let config_dir = std::fs::canonicalize(find_config_dir(config_dir)?)?;
    let axd = std::env::current_exe()?.with_file_name("axd");
    if !axd.exists() {
        bail!("{} not found: build it first (cargo build)", axd.display());
    }
    let dir = std::env::temp_dir().join(format!("ax-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A copy with the modes axd trusts: a checkout made under umask 002
    // has group-writable files, which axd refuses to load (docs/users.md).
    let jobs = dir.join("jobs.d");
    copy_trusted(&config_dir.join("jobs.d"), &jobs)
        .with_context(|| format!("copying the examples to {}", jobs.display()))?;
    let config = dir.join("axd.toml");
    std::fs::write(
        &config,
        format!(
            "jobs_dir = {jobs:?}\nstate_dir = \"state\"\nsocket = \"axd.sock\"\nmax_concurrency = 4\ntimezone = \"UTC\"\n[pools.default]\nslots = 4\n[pools.io]\nslots = 2\n",
        ),
    )?;
    let log = std::fs::File::create(dir.join("axd.log"))?;
    let child = std::process::Command::new(&axd)
        .arg("--config")
        .arg(&config)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", axd.display()))?;
    let socket = dir.join("axd.sock");
    let demo = Demo { child, dir };
    for _ in 0..400 {
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            return Ok((demo, socket));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!(
        "the demo daemon did not start; see {}",
        demo.dir.join("axd.log").display()
    )
}

/// Copies the folders and regular files of `from` to `to`, folders 0755
/// and files 0644 whatever the umask.
fn copy_trusted(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_trusted(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

async fn seed_demo(socket: &Path) -> anyhow::Result<()> {
    use ax_protocol::request::{Submit, Trigger};
    let mut c = ax_protocol::client::Client::connect(socket, "ax-tui-demo").await?;
    for dag in ["weekly-report", "etl-nightly", "disk-usage"] {
        c.request(Trigger {
            dag: dag.into(),
            force: None,
        })
        .await?;
    }
    let job = |name: &str, command: &str| Submit {
        name: Some(name.into()),
        command: Some(command.into()),
        ..Submit::default()
    };
    c.request(Submit {
        retries: Some(3),
        ..job("flaky-upload", "echo uploading; sleep 1; exit 1")
    })
    .await?;
    c.request(Submit {
        pool: Some("io".into()),
        ..job(
            "long-backfill",
            "for i in $(seq 1 600); do ax heartbeat --progress 0.$((i % 10)) \"chunk $i\"; echo chunk $i; sleep 1; done",
        )
    })
    .await?;
    c.request(Submit {
        priority: Some(95),
        ..job("urgent-fix", "sleep 5; echo fixed")
    })
    .await?;
    Ok(())
}

async fn main_async(args: Args) -> anyhow::Result<()> {
    let (_demo, socket) = if args.demo {
        let (d, s) = start_demo(args.config_dir)?;
        seed_demo(&s).await?;
        (Some(d), SocketChoice::given(s))
    } else {
        let socket = match args.socket {
            Some(path) => SocketChoice::given(path),
            None => ax_protocol::client::default_socket(),
        };
        (None, socket)
    };
    let colour = ax_clients::console::colour_allowed(std::env::var_os("NO_COLOR"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let commands = net::spawn(socket, tx.clone());
    // terminal input
    let input = tx.clone();
    tokio::spawn(async move {
        let mut stream = EventStream::new();
        while let Some(Ok(ev)) = stream.next().await {
            let e = match ev {
                TermEvent::Key(k) if k.kind == KeyEventKind::Press => Event::Key(k),
                TermEvent::Resize(_, _) => Event::Resize,
                _ => continue,
            };
            if input.send(e).is_err() {
                break;
            }
        }
    });
    // clock tick for countdowns and the queue chart
    let tick = tx.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        loop {
            interval.tick().await;
            if tick.send(Event::Tick(chrono::Utc::now())).is_err() {
                break;
            }
        }
    });
    // ratatui::init restores the terminal on panic too.
    let mut terminal = ratatui::init();
    let mut app = App::new(chrono::Utc::now(), colour);
    let result = run::run_app(&mut terminal, &mut app, &mut rx, &commands).await;
    ratatui::restore();
    result.context("terminal")?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ax-tui: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ax-tui: {e:#}");
            ExitCode::FAILURE
        }
    }
}
