//! A log as a terminal shows it. Progress bars (`tqdm`, the Hugging Face `Trainer`) redraw
//! one line with carriage returns, so a log read byte by byte is kilobyte "lines" of
//! redraws; a terminal shows each line's last state. [`render`] does what the terminal does
//! with `\r` (back to column 0, later characters overwrite earlier ones, a shorter redraw
//! leaves the tail of a longer one) and nothing else: other control bytes and escape
//! sequences pass through as they are.
//!
//! [`Follower`] does the same for a log that grows: it hands out each line once it is
//! complete, and the line still being drawn when asked to [`Follower::finish`].

/// The text with every line's carriage returns applied.
pub fn render(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split('\n').peekable();
    while let Some(line) = lines.next() {
        out.push_str(&render_line(line));
        if lines.peek().is_some() {
            out.push('\n');
        }
    }
    out
}

/// One line (no `\n`) as its last state on a terminal.
fn render_line(line: &str) -> String {
    if !line.contains('\r') {
        return line.to_string();
    }
    let mut cells: Vec<char> = Vec::new();
    let mut column = 0;
    for c in line.chars() {
        if c == '\r' {
            column = 0;
        } else if column < cells.len() {
            cells[column] = c;
            column += 1;
        } else {
            cells.push(c);
            column += 1;
        }
    }
    cells.into_iter().collect()
}

/// The most of an unfinished line a [`Follower`] holds. A progress bar redrawn for days, or
/// output that never ends a line, must not grow its reader without bound.
pub const MAX_PARTIAL: usize = 1024 * 1024;

/// Renders a growing log: bytes in, complete rendered lines out.
#[derive(Debug, Default)]
pub struct Follower {
    /// The bytes of the line not yet ended by `\n`, at most about [`MAX_PARTIAL`].
    partial: Vec<u8>,
    /// Each redraw is handed out as a line of its own, as it comes: a reader that is not a
    /// terminal (a pipe, `tee`, an agent) sees a progress bar move instead of nothing until
    /// its line ends.
    each_redraw: bool,
}

impl Follower {
    /// A follower that hands out every redraw of a line as a line (see `each_redraw`).
    pub fn each_redraw_a_line() -> Follower {
        Follower {
            partial: Vec::new(),
            each_redraw: true,
        }
    }

    /// The lines that `bytes` completes, rendered, each with its `\n`; and, of a line longer
    /// than [`MAX_PARTIAL`] even with its redraws applied, what it shows so far.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        if self.each_redraw {
            return self.push_redraws(bytes);
        }
        self.partial.extend_from_slice(bytes);
        // Only the new bytes can end the line.
        let mut out = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                let end = self.partial.len() - bytes.len() + i;
                let complete: Vec<u8> = self.partial.drain(..=end).collect();
                render(&String::from_utf8_lossy(&complete))
            }
            None => String::new(),
        };
        if self.partial.len() > MAX_PARTIAL {
            out.push_str(&self.bound());
        }
        out
    }

    /// [`Follower::push`] with each redraw a line: at every `\r` that does not end the line
    /// (`\r\n` is a line end), the line's state on a terminal is handed out, and kept as the
    /// start of the next redraw, which overwrites it from column 0 as a terminal would.
    fn push_redraws(&mut self, bytes: &[u8]) -> String {
        let mut out = String::new();
        for &b in bytes {
            // A `\r` held back at the end of the last bytes: a redraw unless `\n` follows.
            if self.partial.last() == Some(&b'\r') && b != b'\n' {
                let cr = self.partial.len() - 1;
                let shown = render_line(&String::from_utf8_lossy(&self.partial[..cr]));
                if !shown.is_empty() {
                    out.push_str(&shown);
                    out.push('\n');
                }
                self.partial = shown.into_bytes();
                self.partial.push(b'\r');
            }
            self.partial.push(b);
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial);
                out.push_str(&render(&String::from_utf8_lossy(&line)));
            }
        }
        if self.partial.len() > MAX_PARTIAL {
            out.push_str(&self.bound());
        }
        out
    }

    /// Shrinks the unfinished line: its redraws up to the last `\r` are replaced by what they
    /// show (followed by that `\r`, so what comes after still overwrites from column 0, and
    /// the line renders as before). A line still over the bound has no redraws to apply: it
    /// is handed out as it is so far (up to a character cut at its end), and what follows
    /// continues it, as on a terminal; a later `\r` can only redraw what follows.
    fn bound(&mut self) -> String {
        if let Some(cr) = self.partial.iter().rposition(|&b| b == b'\r') {
            let shown = render_line(&String::from_utf8_lossy(&self.partial[..cr]));
            let mut compact = shown.into_bytes();
            compact.push(b'\r');
            compact.extend_from_slice(&self.partial[cr + 1..]);
            self.partial = compact;
        }
        if self.partial.len() <= MAX_PARTIAL {
            return String::new();
        }
        let cut = match std::str::from_utf8(&self.partial) {
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            _ => self.partial.len(),
        };
        let rest = self.partial.split_off(cut);
        let line = std::mem::replace(&mut self.partial, rest);
        render_line(&String::from_utf8_lossy(&line))
    }

    /// The line still being drawn, rendered (with a `\n` so that what follows starts on a
    /// line of its own); empty when the log ended with a complete line.
    pub fn finish(&mut self) -> String {
        if self.partial.is_empty() {
            return String::new();
        }
        let rest = std::mem::take(&mut self.partial);
        let mut line = render_line(&String::from_utf8_lossy(&rest));
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redrawn_line_shows_its_last_state() {
        #[rustfmt::skip]
        let cases = [
            ("plain\nlines\n", "plain\nlines\n"),
            (" 10%|#  |\r 50%|## |\r100%|###|\ndone\n", "100%|###|\ndone\n"),
            // A shorter redraw leaves the tail of the longer one, as on a terminal.
            ("abcdef\rXY", "XYcdef"),
            // Windows line ends are ordinary line ends.
            ("one\r\ntwo\r\n", "one\ntwo\n"),
            ("\r\r", ""),
            ("bar 1\rbar 2\r", "bar 2"),
            ("é\rx", "x"),
        ];
        for (raw, shown) in cases {
            assert_eq!(render(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn into_a_pipe_each_redraw_is_a_line_as_it_comes() {
        let mut f = Follower::each_redraw_a_line();
        assert_eq!(f.push(b"epoch 1\n 10%|#  |\r"), "epoch 1\n");
        // The `\r` is a redraw once the next byte is not a line end.
        assert_eq!(f.push(b" 50%|## |\r"), " 10%|#  |\n");
        assert_eq!(f.push(b"100%|###|\n"), " 50%|## |\n100%|###|\n");
        // A shorter redraw overwrites from column 0 and leaves the rest, as on a terminal.
        assert_eq!(f.push(b"abcdef\rXY\rZ"), "abcdef\nXYcdef\n");
        assert_eq!(f.finish(), "ZYcdef\n");
        // Windows line ends are line ends, not redraws.
        assert_eq!(f.push(b"one\r\ntwo\r"), "one\n");
        assert_eq!(f.push(b"\n"), "two\n");
    }

    #[test]
    fn a_follower_hands_out_complete_lines_then_the_partial_one() {
        let mut f = Follower::default();
        assert_eq!(f.push(b"epoch 1\n 10%"), "epoch 1\n");
        assert_eq!(f.push(b"\r 60%"), "");
        assert_eq!(f.push(b"\r100%\nepoch"), "100%\n");
        assert_eq!(f.push(b" 2 \r"), "");
        assert_eq!(f.finish(), "epoch 2 \n");
        assert_eq!(f.finish(), "");
    }

    #[test]
    fn a_bar_redrawn_without_end_is_held_at_its_last_state_only() {
        let mut f = Follower::default();
        let mut shown = String::new();
        let mut whole = String::new();
        // 4 MiB of redraws of one line, never ended: far past the bound.
        for i in 0..200_000 {
            let redraw = format!("\r{:>6} steps|{}|", i, "#".repeat(i % 7));
            whole.push_str(&redraw);
            shown.push_str(&f.push(redraw.as_bytes()));
            assert!(f.partial.len() <= MAX_PARTIAL + 64, "{}", f.partial.len());
        }
        assert_eq!(shown, "", "nothing is handed out before the line ends");
        whole.push('\n');
        // Exactly what the whole line shows, a longer redraw's tail included.
        assert_eq!(f.push(b"\n"), render(&whole));
        assert!(render(&whole).starts_with("199999 steps|##|"));
    }

    #[test]
    fn a_line_longer_than_the_bound_is_handed_out_in_pieces_whole_characters_each() {
        let mut f = Follower::default();
        let mut shown = String::new();
        // 2.4 MB of two-byte characters in reads of an odd size: some end inside one.
        let line = "\u{e9}".repeat(1_200_000);
        for piece in line.as_bytes().chunks(333) {
            shown.push_str(&f.push(piece));
            assert!(f.partial.len() <= MAX_PARTIAL + 333);
        }
        shown.push_str(&f.push(b"\n"));
        assert!(!shown.contains('\u{fffd}'), "no character is cut in two");
        assert_eq!(shown.len(), line.len() + 1);
        assert!(shown.ends_with("\u{e9}\n"));
    }
}
