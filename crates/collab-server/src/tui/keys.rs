//! Keys from the bytes a terminal sends: printable text (UTF-8), Enter,
//! Tab, Backspace, Escape, Ctrl+letter, and the CSI/SS3 sequences of the
//! arrows, Home/End and Page Up/Down. Anything else (mouse reports, focus
//! events, unknown sequences) is dropped whole. The parser keeps at most
//! [`MAX_PENDING`] bytes of an unfinished sequence between reads.

/// One key press.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Enter,
    Tab,
    BackTab,
    Backspace,
    Esc,
    Up,
    Down,
    Left,
    Right,
    Home,
    End,
    PageUp,
    PageDown,
}

/// Bytes of an unfinished sequence kept for the next read.
pub const MAX_PENDING: usize = 32;

#[derive(Default)]
pub struct Parser {
    pending: Vec<u8>,
}

impl Parser {
    /// Bytes of an unfinished sequence waiting for the next read.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The keys in `bytes` (with what was pending before). A lone ESC at
    /// the end of a read is a key press of its own: terminals send a
    /// sequence in one write.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Key> {
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(bytes);
        let mut keys = Vec::new();
        let mut i = 0;
        while i < input.len() {
            match parse_one(&input[i..]) {
                Step::Key(key, used) => {
                    keys.push(key);
                    i += used;
                }
                Step::Skip(used) => i += used,
                Step::Incomplete => {
                    let rest = &input[i..];
                    if rest.len() <= MAX_PENDING && rest[0] != 0x1b {
                        // A UTF-8 character cut between reads.
                        self.pending = rest.to_vec();
                    } else if rest[0] == 0x1b && rest.len() == 1 {
                        keys.push(Key::Esc);
                    } else if rest.len() <= MAX_PENDING {
                        self.pending = rest.to_vec();
                    }
                    break;
                }
            }
        }
        keys
    }
}

enum Step {
    Key(Key, usize),
    Skip(usize),
    Incomplete,
}

fn parse_one(b: &[u8]) -> Step {
    match b[0] {
        b'\r' | b'\n' => Step::Key(Key::Enter, 1),
        b'\t' => Step::Key(Key::Tab, 1),
        0x7f | 0x08 => Step::Key(Key::Backspace, 1),
        0x1b => escape(b),
        c @ 0x01..=0x1a => Step::Key(Key::Ctrl((b'a' + c - 1) as char), 1),
        c if c < 0x20 => Step::Skip(1),
        c if c < 0x80 => Step::Key(Key::Char(c as char), 1),
        c => {
            let len = match c {
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => return Step::Skip(1),
            };
            if b.len() < len {
                return Step::Incomplete;
            }
            match std::str::from_utf8(&b[..len])
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(ch) if !ch.is_control() => Step::Key(Key::Char(ch), len),
                _ => Step::Skip(1),
            }
        }
    }
}

fn escape(b: &[u8]) -> Step {
    let Some(&kind) = b.get(1) else {
        return Step::Incomplete;
    };
    match kind {
        b'[' => {
            // CSI: parameters 0x30-0x3f, intermediates 0x20-0x2f, a final 0x40-0x7e.
            let mut j = 2;
            while j < b.len() {
                let c = b[j];
                if (0x40..=0x7e).contains(&c) {
                    let params = &b[2..j];
                    let used = j + 1;
                    return match (params, c) {
                        (_, b'A') => Step::Key(Key::Up, used),
                        (_, b'B') => Step::Key(Key::Down, used),
                        (_, b'C') => Step::Key(Key::Right, used),
                        (_, b'D') => Step::Key(Key::Left, used),
                        (_, b'H') => Step::Key(Key::Home, used),
                        (_, b'F') => Step::Key(Key::End, used),
                        (_, b'Z') => Step::Key(Key::BackTab, used),
                        (b"1" | b"7", b'~') => Step::Key(Key::Home, used),
                        (b"4" | b"8", b'~') => Step::Key(Key::End, used),
                        (b"5", b'~') => Step::Key(Key::PageUp, used),
                        (b"6", b'~') => Step::Key(Key::PageDown, used),
                        _ => Step::Skip(used),
                    };
                }
                if !(0x20..=0x3f).contains(&c) {
                    // Not a CSI after all: drop the introducer only.
                    return Step::Skip(2);
                }
                j += 1;
            }
            if b.len() > MAX_PENDING {
                Step::Skip(b.len())
            } else {
                Step::Incomplete
            }
        }
        b'O' => match b.get(2) {
            None => Step::Incomplete,
            Some(b'A') => Step::Key(Key::Up, 3),
            Some(b'B') => Step::Key(Key::Down, 3),
            Some(b'C') => Step::Key(Key::Right, 3),
            Some(b'D') => Step::Key(Key::Left, 3),
            Some(b'H') => Step::Key(Key::Home, 3),
            Some(b'F') => Step::Key(Key::End, 3),
            Some(_) => Step::Skip(3),
        },
        // ESC then ESC: the first is a key press.
        0x1b => Step::Key(Key::Esc, 1),
        // Alt+key and the like: drop the ESC, keep the key.
        _ => Step::Skip(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        Parser::default().feed(bytes)
    }

    #[test]
    fn arrows_text_and_controls() {
        assert_eq!(
            keys(b"j\x1b[A\x1bOB\r\t\x7f?"),
            vec![
                Key::Char('j'),
                Key::Up,
                Key::Down,
                Key::Enter,
                Key::Tab,
                Key::Backspace,
                Key::Char('?')
            ]
        );
        assert_eq!(keys(b"\x1b[5~\x1b[6~"), vec![Key::PageUp, Key::PageDown]);
        assert_eq!(keys(b"\x1b"), vec![Key::Esc]);
        assert_eq!(
            keys("é🙂".as_bytes()),
            vec![Key::Char('é'), Key::Char('🙂')]
        );
        assert_eq!(keys(b"\x03"), vec![Key::Ctrl('c')]);
    }

    #[test]
    fn sequences_and_characters_split_across_reads() {
        let mut p = Parser::default();
        assert_eq!(p.feed(b"\x1b["), vec![]);
        assert_eq!(p.feed(b"A"), vec![Key::Up]);
        let smile = "🙂".as_bytes();
        assert_eq!(p.feed(&smile[..2]), vec![]);
        assert_eq!(p.feed(&smile[2..]), vec![Key::Char('🙂')]);
    }

    proptest::proptest! {
        /// Any bytes, in any two reads: no panic, at most one key a byte,
        /// at most `MAX_PENDING` bytes kept.
        #[test]
        fn any_bytes_make_bounded_keys(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300), split in 0usize..300) {
            let split = split.min(bytes.len());
            let mut p = Parser::default();
            let mut keys = p.feed(&bytes[..split]);
            proptest::prop_assert!(p.pending() <= MAX_PENDING);
            keys.extend(p.feed(&bytes[split..]));
            proptest::prop_assert!(p.pending() <= MAX_PENDING);
            proptest::prop_assert!(keys.len() <= bytes.len());
        }
    }

    #[test]
    fn unknown_and_hostile_input_is_dropped_and_bounded() {
        // A mouse report, an OSC, C1 bytes, a huge unfinished CSI.
        assert_eq!(keys(b"\x1b[<0;3;4Mq"), vec![Key::Char('q')]);
        assert_eq!(keys(b"\xc2\x9bx"), vec![Key::Char('x')]);
        let mut p = Parser::default();
        let mut long = b"\x1b[".to_vec();
        long.extend(std::iter::repeat_n(b'1', 10_000));
        assert_eq!(p.feed(&long), vec![]);
        assert!(p.pending.len() <= MAX_PENDING);
        assert_eq!(p.feed(b"k"), vec![Key::Char('k')]);
    }
}
