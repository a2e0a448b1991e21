//! The run loop, generic over the ratatui backend (tests use TestBackend).

use ratatui::Terminal;
use ratatui::backend::Backend;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::state::{App, Command, Event};
use super::ui;

/// Handles events until the user quits: every batch of waiting events is
/// applied, then one frame is drawn (redraw on change, not on a timer).
pub async fn run_app<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    events: &mut UnboundedReceiver<Event>,
    commands: &UnboundedSender<Command>,
) -> Result<(), B::Error> {
    app.window = rows_for(terminal.size()?.height);
    terminal.draw(|f| ui::render(f, app))?;
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        while let Ok(e) = events.try_recv() {
            batch.push(e);
        }
        for e in batch {
            if matches!(e, Event::Resize) {
                app.window = rows_for(terminal.size()?.height);
            }
            for c in app.handle(e) {
                let _ = commands.send(c);
            }
        }
        if app.quit {
            break;
        }
        terminal.draw(|f| ui::render(f, app))?;
    }
    Ok(())
}

/// How many runs to ask for: what fits, with room to scroll a little.
fn rows_for(height: u16) -> u32 {
    u32::from(height).max(10) * 2
}
