//! The terminal UI over SSH (docs/tui.md): served on a session channel
//! that asked for a pty and then for a shell (`ssh -t HOST`) or ran the
//! `tui` verb (`ssh -t HOST tui`).
//!
//! - `view`: the screens, keys and drawing (no IO);
//! - `data`: what they show, read as the caller through the verbs;
//! - `keys`: the bytes a terminal sends, as keys;
//! - `backend`: ratatui drawing to ANSI bytes for the channel.
//!
//! Every write (comment, label, close/reopen, claim, release, review) is
//! the verb's argv run through `ssh::call`, the same handler, authorization
//! and events as `ssh HOST collab-…`; nothing here writes by itself.
//!
//! Bounded (docs/security.md, "The terminal UI"): a key has at most
//! `ssh.max_tui_per_principal` sessions open (`limits::running`, taken by
//! `ssh::exec`); the screen is at most [`MAX_COLS`]x[`MAX_ROWS`] cells,
//! whatever the pty asked for; the session ends after
//! `ssh.tui_idle_timeout` without a key press (bytes that decode to no key
//! do not count), and `ssh.tui_max_lifetime` after it opened however many
//! keys were pressed; a frame is at most
//! `backend::MAX_FRAME` bytes and the next is drawn only once the last was
//! sent, so a client that stops reading holds one frame, and after
//! `ssh.tui_stall_timeout` with its window full the connection is dropped.
//! Input is drained at once into a queue of [`INPUT_QUEUE`] reads (more are
//! dropped, never buffered), lists load a page at a time, the events pane
//! keeps the newest `view::MAX_EVENTS`.

pub mod backend;
pub mod data;
pub mod keys;
#[cfg(test)]
mod snapshot_tests;
pub mod view;

use std::time::Duration;

use ratatui::layout::{Rect, Size};
use ratatui::{Terminal, TerminalOptions, Viewport};
use russh::server::Msg;
use russh::{Channel, ChannelMsg, ChannelWriteHalf};
use tokio::sync::mpsc;

use crate::ssh::context::ExecContext;
use backend::AnsiBackend;
use view::{Cmd, Ui};

/// Reads from the client waiting to be handled; past this they are
/// dropped (a paste flood), so the connection is never stalled by us.
pub const INPUT_QUEUE: usize = 64;
/// How long a decision that the key is admitted stands for the live
/// events pane (the same as `collab-events watch`); an action always asks.
const ADMISSION_TTL: Duration = Duration::from_secs(5);
/// Largest screen drawn; a bigger window is drawn at this size, in its
/// top left corner. A session's memory grows with its cells (about 8 MB at
/// 500x200, whatever it shows), and 300x100 is more than a full-screen
/// terminal at a readable font size on a large monitor.
pub const MAX_COLS: u16 = 300;
pub const MAX_ROWS: u16 = 100;

/// The one line a channel without a pty gets for `tui`.
pub const NEEDS_PTY: &str =
    "error: the terminal UI needs a terminal: run `ssh -t HOST tui` (or `ssh -t HOST`)";

/// The one line a `TERM=dumb` (or unset) terminal gets.
pub const DUMB_TERMINAL: &str = "error: the terminal UI needs a terminal that can move the cursor (TERM is dumb); use the verbs instead: `ssh HOST help`";

fn size_of(cols: u32, rows: u32) -> Size {
    Size::new(
        u16::try_from(cols).unwrap_or(MAX_COLS).clamp(1, MAX_COLS),
        u16::try_from(rows).unwrap_or(MAX_ROWS).clamp(1, MAX_ROWS),
    )
}

/// Serve the terminal UI on `channel` until the user quits, goes idle,
/// stops reading, or the server stops.
pub async fn run(mut ctx: ExecContext, channel: Channel<Msg>) {
    let Some(pty) = ctx.env.pty.clone() else {
        let (read, write) = channel.split();
        drop(read);
        finish(&write, Some(NEEDS_PTY), 1).await;
        return;
    };
    let no_color = ctx.env.no_color;
    let term = pty.term.trim().to_ascii_lowercase();
    let (mut read, write) = channel.split();
    if term.is_empty() || term == "dumb" {
        finish(&write, Some(DUMB_TERMINAL), 1).await;
        return;
    }
    // Drain the client at once (an undrained channel stalls the whole
    // connection); keys wait in a bounded queue.
    let (tx, mut rx) = mpsc::channel::<ChannelMsg>(INPUT_QUEUE);
    let drain = tokio::spawn(async move {
        while let Some(msg) = read.wait().await {
            let last = matches!(msg, ChannelMsg::Close | ChannelMsg::Eof);
            let _ = tx.try_send(msg);
            if last {
                break;
            }
        }
    });
    let config = &ctx.app.config.ssh;
    let (idle, stall) = (config.tui_idle_timeout, config.tui_stall_timeout);
    // However busy, a session ends: one key press per idle interval (a
    // script, a stuck key) would otherwise hold its TUI place forever.
    let ends_at = tokio::time::Instant::now() + config.tui_max_lifetime;
    let size = size_of(pty.cols, pty.rows);
    let backend = AnsiBackend::new(size, !no_color);
    let options = TerminalOptions {
        viewport: Viewport::Fixed(Rect::new(0, 0, size.width, size.height)),
    };
    let Ok(mut terminal) = Terminal::with_options(backend, options) else {
        finish(&write, Some("error: internal error"), 1).await;
        return;
    };
    let mut ui = Ui::new(ctx.caller.principal().to_string(), !no_color);
    let mut parser = keys::Parser::default();
    let mut visibility = crate::service::events::Visibility::new(ctx.caller.clone());
    // The pane starts with the last events before now.
    let head = data::event_head(&ctx).await;
    let mut seen = data::events_after(
        &ctx,
        &mut visibility,
        (head - view::MAX_EVENTS as i64).max(0),
        &mut ui.events,
    )
    .await;
    let mut event_head = ctx.app.writer.subscribe_event_head();
    let stopping = ctx.app.stopping.clone();
    // Alternate screen, cursor hidden; given back on the way out.
    if !send(&ctx, &write, b"\x1b[?1049h\x1b[?25l\x1b[2J".to_vec(), stall).await {
        drain.abort();
        return;
    }
    load(&ctx, &mut ui).await;
    let mut last_key = tokio::time::Instant::now();
    let mut admitted_at = tokio::time::Instant::now();
    let outcome = loop {
        ui.now = chrono::Utc::now().timestamp();
        if terminal.draw(|f| ui.draw(f)).is_err() {
            break Some("error: internal error");
        }
        let frame = terminal.backend_mut().take();
        if !send(&ctx, &write, frame, stall).await {
            drain.abort();
            return;
        }
        let mut cmd = Cmd::None;
        let mut events_due = false;
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(ChannelMsg::Data { data }) => {
                    let keys = parser.feed(&data);
                    // Only bytes that are keys count as use: a client
                    // sending bytes that are none (a lone NUL, an unknown
                    // sequence) every few minutes is idle.
                    if !keys.is_empty() {
                        last_key = tokio::time::Instant::now();
                    }
                    for key in keys {
                        cmd = ui.key(key);
                        if cmd != Cmd::None {
                            break;
                        }
                    }
                }
                Some(ChannelMsg::WindowChange { col_width, row_height, .. }) => {
                    let size = size_of(col_width, row_height);
                    terminal.backend_mut().resize(size);
                    let _ = terminal.resize(Rect::new(0, 0, size.width, size.height));
                    let _ = terminal.clear();
                }
                Some(ChannelMsg::Eof | ChannelMsg::Close) | None => {
                    drain.abort();
                    return;
                }
                Some(_) => {}
            },
            changed = async { event_head.wait_for(|&h| h > seen).await.map(|_| ()) } => {
                if changed.is_err() {
                    break Some("error: the server is shutting down");
                }
                events_due = true;
            }
            _ = tokio::time::sleep_until(last_key + idle) => {
                break Some("error: closed after ssh.tui_idle_timeout without a key press");
            }
            _ = tokio::time::sleep_until(ends_at) => {
                break Some("error: closed after ssh.tui_max_lifetime; connect again to go on");
            }
            _ = stopping.clone().wait() => break Some("error: the server is shutting down"),
        }
        // A session lasts until it goes idle, so the key's admission (a
        // line removed from authorized_keys, a revoked certificate, a
        // governance change) is decided again before each action, as the
        // next `ssh` command would be, and before live events are shown.
        if cmd != Cmd::None || (events_due && admitted_at.elapsed() >= ADMISSION_TTL) {
            if !crate::authz::is_admitted(&ctx.app, &ctx.caller.identity) {
                break Some("error: this key is no longer admitted");
            }
            ctx.caller = crate::authz::caller_for(&ctx.app, ctx.caller.identity.clone());
            visibility = crate::service::events::Visibility::new(ctx.caller.clone());
            admitted_at = tokio::time::Instant::now();
        }
        if events_due {
            seen = data::events_after(&ctx, &mut visibility, seen, &mut ui.events).await;
        }
        match cmd {
            Cmd::None => {}
            Cmd::Quit => break None,
            Cmd::Load => load(&ctx, &mut ui).await,
            Cmd::Act { argv, done } => {
                let words: Vec<&str> = argv.iter().map(String::as_str).collect();
                ui.status = Some(match crate::ssh::call::call(&ctx, &words, None).await {
                    Ok(_) => (done, false),
                    Err(e) => (e, true),
                });
                let status = ui.status.take();
                load(&ctx, &mut ui).await;
                ui.status = status;
            }
        }
    };
    let _ = send(
        &ctx,
        &write,
        b"\x1b[0m\x1b[2J\x1b[?25h\x1b[?1049l".to_vec(),
        stall,
    )
    .await;
    drain.abort();
    finish(&write, outcome, u32::from(outcome.is_some())).await;
}

/// Load the top screen's page, keeping its place when it was loaded
/// before.
async fn load(ctx: &ExecContext, ui: &mut Ui) {
    let (kind, after) = {
        let view = ui.top_mut();
        view.loading = true;
        (view.kind.clone(), view.after.clone())
    };
    let loaded = data::load(ctx, &kind, after.as_deref()).await;
    let view = ui.top_mut();
    view.loading = false;
    match loaded {
        Ok(loaded) => {
            view.data = loaded.data;
            view.diff = loaded.diff;
        }
        Err(e) => {
            ui.status = Some((e, true));
        }
    }
}

/// Send one frame, waiting for the client's window at most `stall`; false
/// when the client closed the channel or left (at once: a closed channel's
/// window never opens, issue 44), or stopped reading (then the connection
/// is dropped).
async fn send(
    ctx: &ExecContext,
    write: &ChannelWriteHalf<Msg>,
    bytes: Vec<u8>,
    stall: Duration,
) -> bool {
    let sent = crate::ssh::reply::unless_caller_left(write.data_bytes(bytes));
    match tokio::time::timeout(stall, sent).await {
        Ok(Some(Ok(()))) => true,
        Ok(Some(Err(_)) | None) => false,
        Err(_) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                "tui: the client stopped reading; dropping the connection"
            );
            let _ = ctx
                .session
                .disconnect(
                    russh::Disconnect::ByApplication,
                    "terminal UI: the client stopped reading".into(),
                    String::new(),
                )
                .await;
            false
        }
    }
}

/// The last line (on stderr, `\r\n`: the client's terminal is raw), the
/// exit status, EOF and close.
async fn finish(write: &ChannelWriteHalf<Msg>, message: Option<&str>, code: u32) {
    // A client that has left gives no window for the last line.
    let ended = crate::ssh::reply::unless_caller_left(async {
        if let Some(message) = message {
            let _ = write
                .extended_data_bytes(1, format!("{message}\r\n").into_bytes())
                .await;
        }
        crate::ssh::reply::note_exit_status(code);
        let _ = write.exit_status(code).await;
        let _ = write.eof().await;
        let _ = write.close().await;
    });
    let _ = ended.await;
}

#[cfg(test)]
mod size_tests {
    use super::*;

    #[test]
    fn a_huge_or_empty_pty_is_drawn_within_the_clamp() {
        assert_eq!(size_of(80, 24), Size::new(80, 24));
        assert_eq!(size_of(300, 100), Size::new(300, 100));
        assert_eq!(size_of(500, 200), Size::new(MAX_COLS, MAX_ROWS));
        assert_eq!(size_of(u32::MAX, u32::MAX), Size::new(300, 100));
        assert_eq!(size_of(0, 0), Size::new(1, 1));
    }
}
