//! `ax-bench logview [SECONDS]`: the console's log view keeps up with a job
//! printing about 10,000 lines a second.
//!
//! A job prints `line N` in bursts of 1,000 lines every 0.1 s. The
//! console's own follower task (`console::net::follow_log`, its own
//! connection, long-polling `logs`) feeds an `App` in log mode, and a frame
//! is drawn on a 120×40 test terminal after every batch of events, as
//! `ax-tui` does. Every 100 ms the newest line the job has written (the
//! log's tail, asked on another connection) is compared with the newest
//! line on screen: the lag, in lines and in milliseconds of output.

use std::time::{Duration, Instant};

use ax_clients::console::net::follow_log;
use ax_clients::console::state::{App, Event};
use ax_protocol::client::{Client, SocketChoice};
use ax_protocol::request::{Logs, Submit};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::axd;
use crate::measure::percentile;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// How long to follow the log
    #[arg(default_value_t = 10)]
    seconds: u64,
}

/// The number in the last complete `line N` of `text`.
fn last_line_number(text: &str) -> Option<u64> {
    let complete = &text[..text.rfind('\n')?];
    let last = complete.rsplit('\n').next()?;
    last.strip_prefix("line ")?.trim().parse().ok()
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let d = axd::start(4, &[])?;
    let socket = d.socket.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut c = Client::connect(&socket, axd::CLIENT).await?;
        let printer = "awk 'BEGIN { for (i = 0; ; i++) { print \"line \" i; if (i % 1000 == 999) { fflush(); system(\"sleep 0.1\") } } }'";
        let submitted = c
            .request(Submit {
                name: Some("printer".into()),
                command: Some(printer.into()),
                timeout: Some("1h".into()),
                ..Submit::default()
            })
            .await?;
        let run = submitted.runs[0];
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let follower = tokio::spawn(follow_log(SocketChoice::given(socket.clone()), run, tx));
        let mut app = App::new(chrono::Utc::now(), false);
        app.follow_log(run);
        let mut term = Terminal::new(TestBackend::new(120, 40))?;
        let (mut frames, mut lags, mut written) = (Vec::new(), Vec::new(), Vec::new());
        let start = Instant::now();
        let end = start + Duration::from_secs(args.seconds);
        let mut next_sample = start + Duration::from_millis(500);
        let mut first_written: Option<(Instant, u64)> = None;
        while Instant::now() < end {
            let first = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await;
            if let Ok(Some(Event::Daemon(ev))) = first {
                app.on_daemon(ev);
                while let Ok(Event::Daemon(ev)) = rx.try_recv() {
                    app.on_daemon(ev);
                }
                let t = Instant::now();
                term.draw(|f| ax_clients::console::ui::render(f, &app))?;
                frames.push(t.elapsed().as_secs_f64() * 1e3);
            }
            if Instant::now() >= next_sample {
                next_sample += Duration::from_millis(100);
                let tail = c
                    .request(Logs {
                        run,
                        tail: Some(4096),
                        ..Logs::default()
                    })
                    .await?;
                // The newest complete line (a partial one may be cut
                // mid-number).
                let held = app.log().newest(2);
                let complete = &held[..held.len() - usize::from(!app.log().partial().is_empty())];
                let shown = complete
                    .iter()
                    .rev()
                    .find_map(|l| l.strip_prefix("line ")?.parse::<u64>().ok());
                if let (Some(w), Some(s)) = (last_line_number(&tail.data), shown) {
                    first_written.get_or_insert((Instant::now(), w));
                    written.push((Instant::now(), w));
                    lags.push(w.saturating_sub(s) as f64);
                }
            }
        }
        follower.abort();
        let (t0, w0) = first_written.ok_or_else(|| anyhow::anyhow!("no output seen"))?;
        let (t1, w1) = *written.last().expect("samples");
        let rate = (w1 - w0) as f64 / (t1 - t0).as_secs_f64();
        let ms = |lines: f64| lines / rate * 1e3;
        let behind = lags.iter().filter(|l| **l > 0.0).count();
        let (p50, p99, max) = (
            percentile(&mut lags, 0.5),
            percentile(&mut lags, 0.99),
            lags.iter().copied().fold(0.0, f64::max),
        );
        println!("job output: {rate:.0} lines/s over {:.1} s", (t1 - t0).as_secs_f64());
        println!(
            "lag behind the newest line written: p50 {p50:.0} lines ({:.0} ms), p99 {p99:.0} lines ({:.0} ms), max {max:.0} lines ({:.0} ms); behind in {behind} of {} samples",
            ms(p50),
            ms(p99),
            ms(max),
            lags.len()
        );
        println!(
            "frames: {} drawn, p50 {:.2} ms, p99 {:.2} ms; lines held {}, received {}, bytes skipped {}",
            frames.len(),
            percentile(&mut frames, 0.5),
            percentile(&mut frames, 0.99),
            app.log().len(),
            app.log().received,
            app.log().skipped
        );
        let _ = c
            .request(ax_protocol::request::Cancel {
                id: Some(run),
                ids: None,
            })
            .await;
        anyhow::Ok(())
    })?;
    drop(d);
    Ok(())
}
