//! Reading a log one bounded line at a time.

use std::io::{self, BufRead};

/// A line as read: its bytes, or the fact that it was longer than the bound.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// The line without its terminator (`\n` or `\r\n`).
    Text(&'a [u8]),
    /// The line exceeded the bound; its bytes were read and dropped.
    TooLong,
}

/// Splits a reader into lines, holding at most `max_len` bytes of any one.
///
/// A line longer than the bound is consumed to its end and reported as
/// [`Line::TooLong`], so one enormous field costs time but never memory.
/// Blank lines (empty, or only spaces and tabs) are skipped: they hold no
/// request, so they are neither requests nor malformed; they still count
/// in the line numbers.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    max_len: usize,
    number: u64,
    consumed: u64,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(inner: R, max_len: usize) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            max_len,
            number: 0,
            consumed: 0,
        }
    }

    /// The 1-based number of the line last returned.
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Bytes consumed from the reader so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next line that is not blank, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        loop {
            match self.read_line()? {
                None => return Ok(None),
                Some(Read::TooLong) => return Ok(Some(Line::TooLong)),
                Some(Read::Text) if is_blank(&self.buf) => {}
                Some(Read::Text) => return Ok(Some(Line::Text(&self.buf))),
            }
        }
    }

    /// Reads the next line into `buf`.
    fn read_line(&mut self) -> io::Result<Option<Read>> {
        self.buf.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(available) => available,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if available.is_empty() {
                break;
            }
            any = true;
            let (chunk, used, done) = match memchr::memchr(b'\n', available) {
                Some(end) => (&available[..end], end + 1, true),
                None => (available, available.len(), false),
            };
            if !too_long {
                if self.buf.len() + chunk.len() > self.max_len {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            self.inner.consume(used);
            self.consumed += used as u64;
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.number += 1;
        if too_long {
            return Ok(Some(Read::TooLong));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(Read::Text))
    }
}

/// What [`LineReader::read_line`] left in the buffer.
enum Read {
    Text,
    TooLong,
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&byte| byte == b' ' || byte == b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line read, with its number.
    fn lines(input: &[u8], max_len: usize) -> Vec<(u64, Result<Vec<u8>, ()>)> {
        // A tiny buffer makes lines span several fills.
        let mut reader = LineReader::new(io::BufReader::with_capacity(3, input), max_len);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().expect("reading a slice cannot fail") {
            let line = match line {
                Line::Text(text) => Ok(text.to_vec()),
                Line::TooLong => Err(()),
            };
            out.push((reader.number(), line));
        }
        out
    }

    #[test]
    fn splits_on_newlines_and_strips_carriage_returns() {
        assert_eq!(
            lines(b"ab\r\ncd\nef", 10),
            vec![
                (1, Ok(b"ab".to_vec())),
                (2, Ok(b"cd".to_vec())),
                (3, Ok(b"ef".to_vec()))
            ]
        );
    }

    #[test]
    fn blank_lines_are_skipped_but_numbered() {
        assert_eq!(
            lines(b"\nab\n\n \t\r\n\r\ncd\n \n", 10),
            vec![(2, Ok(b"ab".to_vec())), (6, Ok(b"cd".to_vec()))]
        );
        assert_eq!(lines(b"\n\n  \n", 10), vec![]);
    }

    #[test]
    fn a_line_over_the_bound_is_reported_and_the_next_one_read() {
        assert_eq!(
            lines(b"0123456789abc\nok\n", 10),
            vec![(1, Err(())), (2, Ok(b"ok".to_vec()))]
        );
    }
}
