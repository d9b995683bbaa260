//! A ratatui backend that writes a frame as ANSI bytes into a buffer (the
//! session sends the buffer to the SSH channel): no local tty is involved,
//! the size is what the client's pty request and window changes said.
//!
//! Every cell's symbol is checked here once more: one holding a control
//! character (C0, DEL, C1) is drawn as `?`, so no byte of user data can
//! ever become an escape sequence, whatever a widget let through.
//! Without colour (`NO_COLOR`) only bold, reverse and underline are sent.

use std::fmt::Write as _;
use std::io;

use ratatui::backend::{Backend, ClearType, WindowSize};
use ratatui::buffer::Cell;
use ratatui::layout::{Position, Size};
use ratatui::style::{Color, Modifier};

/// Bytes one frame may take before drawing stops adding to it (a full
/// 300x100 screen of 4-byte symbols with a style change per cell is well
/// under this).
pub const MAX_FRAME: usize = 4 << 20;

pub struct AnsiBackend {
    out: Vec<u8>,
    size: Size,
    color: bool,
    cursor: Position,
}

impl AnsiBackend {
    pub fn new(size: Size, color: bool) -> AnsiBackend {
        AnsiBackend {
            out: Vec::new(),
            size,
            color,
            cursor: Position::ORIGIN,
        }
    }

    /// The bytes drawn since the last take.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    pub fn resize(&mut self, size: Size) {
        self.size = size;
    }

    fn push(&mut self, s: &str) {
        if self.out.len() + s.len() <= MAX_FRAME {
            self.out.extend_from_slice(s.as_bytes());
        }
    }

    /// The SGR sequence for a cell's style (always from a reset).
    fn sgr(&self, cell: &Cell) -> String {
        let mut codes = vec!["0".to_string()];
        let m = cell.modifier;
        if m.contains(Modifier::BOLD) {
            codes.push("1".into());
        }
        if m.contains(Modifier::DIM) && self.color {
            codes.push("2".into());
        }
        if m.contains(Modifier::ITALIC) && self.color {
            codes.push("3".into());
        }
        if m.contains(Modifier::UNDERLINED) {
            codes.push("4".into());
        }
        if m.contains(Modifier::REVERSED) {
            codes.push("7".into());
        }
        if self.color {
            if let Some(fg) = color_code(cell.fg, false) {
                codes.push(fg);
            }
            if let Some(bg) = color_code(cell.bg, true) {
                codes.push(bg);
            }
        }
        format!("\x1b[{}m", codes.join(";"))
    }
}

/// The SGR parameters of a colour (`None`: the terminal's default).
fn color_code(color: Color, background: bool) -> Option<String> {
    let base = if background { 40 } else { 30 };
    let ext = if background { 48 } else { 38 };
    Some(match color {
        Color::Reset => return None,
        Color::Black => format!("{base}"),
        Color::Red => format!("{}", base + 1),
        Color::Green => format!("{}", base + 2),
        Color::Yellow => format!("{}", base + 3),
        Color::Blue => format!("{}", base + 4),
        Color::Magenta => format!("{}", base + 5),
        Color::Cyan => format!("{}", base + 6),
        Color::Gray => format!("{}", base + 7),
        Color::DarkGray => format!("{}", base + 60),
        Color::LightRed => format!("{}", base + 61),
        Color::LightGreen => format!("{}", base + 62),
        Color::LightYellow => format!("{}", base + 63),
        Color::LightBlue => format!("{}", base + 64),
        Color::LightMagenta => format!("{}", base + 65),
        Color::LightCyan => format!("{}", base + 66),
        Color::White => format!("{}", base + 67),
        Color::Indexed(i) => format!("{ext};5;{i}"),
        Color::Rgb(r, g, b) => format!("{ext};2;{r};{g};{b}"),
    })
}

/// A symbol safe to write: one with any control character becomes `?`.
pub fn safe_symbol(symbol: &str) -> &str {
    if symbol.chars().any(char::is_control) {
        "?"
    } else {
        symbol
    }
}

impl Backend for AnsiBackend {
    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        let mut last: Option<(u16, u16)> = None;
        let mut style = String::new();
        for (x, y, cell) in content {
            if x >= self.size.width || y >= self.size.height {
                continue;
            }
            // Move unless this cell follows the last one on its row.
            if last != Some((x.wrapping_sub(1), y)) || x == 0 {
                let mut at = String::new();
                let _ = write!(at, "\x1b[{};{}H", y + 1, x + 1);
                self.push(&at);
            }
            let sgr = self.sgr(cell);
            if sgr != style {
                self.push(&sgr);
                style = sgr;
            }
            let symbol = safe_symbol(cell.symbol()).to_string();
            self.push(&symbol);
            last = Some((x, y));
        }
        self.push("\x1b[0m");
        Ok(())
    }

    fn hide_cursor(&mut self) -> io::Result<()> {
        self.push("\x1b[?25l");
        Ok(())
    }

    fn show_cursor(&mut self) -> io::Result<()> {
        self.push("\x1b[?25h");
        Ok(())
    }

    fn get_cursor_position(&mut self) -> io::Result<Position> {
        Ok(self.cursor)
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        let p = position.into();
        self.cursor = p;
        let at = format!("\x1b[{};{}H", p.y + 1, p.x + 1);
        self.push(&at);
        Ok(())
    }

    fn clear(&mut self) -> io::Result<()> {
        self.push("\x1b[0m\x1b[2J\x1b[H");
        Ok(())
    }

    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        match clear_type {
            ClearType::All => self.clear(),
            ClearType::AfterCursor => {
                self.push("\x1b[0J");
                Ok(())
            }
            ClearType::BeforeCursor => {
                self.push("\x1b[1J");
                Ok(())
            }
            ClearType::CurrentLine => {
                self.push("\x1b[2K");
                Ok(())
            }
            ClearType::UntilNewLine => {
                self.push("\x1b[0K");
                Ok(())
            }
        }
    }

    fn size(&self) -> io::Result<Size> {
        Ok(self.size)
    }

    fn window_size(&mut self) -> io::Result<WindowSize> {
        Ok(WindowSize {
            columns_rows: self.size,
            pixels: Size::default(),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Style;
    use ratatui::Terminal;

    #[test]
    fn control_characters_never_reach_the_output() {
        let mut terminal = Terminal::new(AnsiBackend::new(Size::new(20, 2), true)).unwrap();
        terminal
            .draw(|f| {
                let buf = f.buffer_mut();
                // Past any widget's own filtering: straight into the cells.
                buf[(0, 0)].set_symbol("\x1b");
                buf[(1, 0)].set_symbol("\u{9b}");
                buf[(2, 0)].set_symbol("a");
                buf[(3, 0)].set_style(Style::default().fg(Color::Red));
            })
            .unwrap();
        let out = terminal.backend_mut().take();
        let text = String::from_utf8(out).unwrap();
        // Every ESC is one of ours: followed by `[` and a known final byte.
        for (i, _) in text.match_indices('\x1b') {
            assert_eq!(&text[i + 1..i + 2], "[", "{text:?}");
        }
        assert!(!text.contains('\u{9b}'));
        assert!(text.contains("??a"), "{text:?}");
    }

    #[test]
    fn no_color_sends_no_colour_codes() {
        let mut terminal = Terminal::new(AnsiBackend::new(Size::new(4, 1), false)).unwrap();
        terminal
            .draw(|f| {
                f.buffer_mut()[(0, 0)]
                    .set_symbol("x")
                    .set_style(Style::default().fg(Color::Red).bg(Color::Blue));
            })
            .unwrap();
        let text = String::from_utf8(terminal.backend_mut().take()).unwrap();
        assert!(!text.contains("31") && !text.contains("44"), "{text:?}");
    }
}
