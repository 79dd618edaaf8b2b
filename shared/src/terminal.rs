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

/// Renders a growing log: bytes in, complete rendered lines out.
#[derive(Debug, Default)]
pub struct Follower {
    /// The bytes of the line not yet ended by `\n`.
    partial: Vec<u8>,
}

impl Follower {
    /// The lines that `bytes` completes, rendered, each with its `\n`.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.partial.extend_from_slice(bytes);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return String::new();
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        render(&String::from_utf8_lossy(&complete))
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
    fn a_follower_hands_out_complete_lines_then_the_partial_one() {
        let mut f = Follower::default();
        assert_eq!(f.push(b"epoch 1\n 10%"), "epoch 1\n");
        assert_eq!(f.push(b"\r 60%"), "");
        assert_eq!(f.push(b"\r100%\nepoch"), "100%\n");
        assert_eq!(f.push(b" 2 \r"), "");
        assert_eq!(f.finish(), "epoch 2 \n");
        assert_eq!(f.finish(), "");
    }
}
