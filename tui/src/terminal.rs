//! Terminal setup and teardown. The terminal is restored on every way out: normal return (the
//! guard's `Drop`), a panic (a hook restores before the panic message is printed, so the message
//! lands on a normal screen), and SIGINT/SIGTERM/SIGHUP (flags the UI loop polls; it then returns
//! and the guard restores).
use std::io::{self, IsTerminal, Stdout, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;

/// The terminal type the live UI draws on.
pub type Tty = Terminal<CrosstermBackend<Stdout>>;

/// Set while the UI owns the terminal, so restoring twice is harmless.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static PANIC_HOOK: Once = Once::new();

/// Puts the terminal back: raw mode off, main screen, cursor visible. Idempotent.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = terminal::disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
        let _ = out.flush();
    }
}

/// Refuses to start the UI when standard output is not a terminal (a pipe, a file, a CI
/// log): the UI would write escape codes there. The error names the commands that write text.
pub fn require_terminal() -> anyhow::Result<()> {
    if io::stdout().is_terminal() {
        return Ok(());
    }
    anyhow::bail!(
        "the terminal UI needs a terminal, and standard output is not one (a pipe or a file). \
         For text, use `tboxscope analyze FILE…` (a report of pcap/pcapng captures or a \
         recording), or `tboxscope capture --json FILE` (the kernel's TCP events as JSON Lines)"
    )
}

/// Owns the terminal while the UI runs; dropping it restores the terminal.
pub struct TerminalGuard {
    /// Set when SIGINT, SIGTERM or SIGHUP arrived; the UI loop checks it every tick.
    pub stop: Arc<AtomicBool>,
    signal_ids: Vec<signal_hook::SigId>,
}

impl TerminalGuard {
    /// Enters raw mode and the alternate screen and installs the panic hook and signal flags.
    /// On failure the terminal is already restored and the error says what failed.
    pub fn enter() -> anyhow::Result<(Self, Tty)> {
        require_terminal()?;
        install_panic_hook();
        let stop = Arc::new(AtomicBool::new(false));
        let mut signal_ids = Vec::new();
        for signal in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            // A second signal ends the process at once, in case the loop cannot see the flag
            // (e.g. the terminal was hung up under a blocked read).
            let armed =
                signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))
                    .map_err(|e| anyhow::anyhow!("cannot watch signal {signal}: {e}"))?;
            let id = signal_hook::flag::register(signal, Arc::clone(&stop))
                .map_err(|e| anyhow::anyhow!("cannot watch signal {signal}: {e}"))?;
            signal_ids.extend([armed, id]);
        }
        let guard = Self { stop, signal_ids };
        ACTIVE.store(true, Ordering::SeqCst);
        terminal::enable_raw_mode()
            .map_err(|e| anyhow::anyhow!("standard input is not a usable terminal: {e}"))?;
        let mut out = io::stdout();
        execute!(out, terminal::EnterAlternateScreen, cursor::Hide)
            .map_err(|e| anyhow::anyhow!("cannot switch to the alternate screen: {e}"))?;
        let tty = Terminal::new(CrosstermBackend::new(out))
            .map_err(|e| anyhow::anyhow!("cannot size the terminal: {e}"))?;
        Ok((guard, tty))
    }

    /// True once a stop signal arrived, or the terminal went away (its window closed, the
    /// tmux pane or SSH session killed) without one reaching us.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || hung_up()
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
        for id in self.signal_ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Waits at most `timeout` for input on the terminal (or its hang-up).
pub fn wait_for_input(timeout: std::time::Duration) {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
        // Keys come from /dev/tty, not standard input: wait a little, then look again.
        std::thread::sleep(timeout.min(std::time::Duration::from_millis(20)));
        return;
    }
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid, initialised pollfd; poll only writes its revents.
    let _ = unsafe { libc::poll(&mut fd, 1, ms) };
}

/// Whether the terminal on standard input has been hung up (or closed).
fn hung_up() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
        return false;
    }
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid, initialised pollfd; a zero timeout only reports the current state.
    let rc = unsafe { libc::poll(&mut fd, 1, 0) };
    rc > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
