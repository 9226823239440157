//! Comma-separated values with a header row, one record per line.
//!
//! Records are read line by line, under the same bound as the other formats,
//! and each line is split by the `csv` crate: a quoted field may hold commas
//! and doubled quotes, but not a newline (a stray quote would otherwise turn
//! the rest of the log into one record).

use std::{
    borrow::Cow,
    io::{self, BufRead},
};

use super::{
    Fields, InputError, Malformed, UnknownField,
    lines::{Line, LineReader},
};

pub(super) struct CsvReader<R> {
    lines: LineReader<R>,
    header: ::csv::ByteRecord,
    record: Record,
}

pub(super) struct Record(::csv::ByteRecord);

/// Splits one line into `record`; `false` when it is not one CSV record.
fn split(line: &[u8], record: &mut ::csv::ByteRecord) -> bool {
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .buffer_capacity(line.len().max(64))
        .from_reader(line);
    match reader.read_byte_record(record) {
        // A second record means the line held a quoted newline's remains.
        Ok(true) => !matches!(
            reader.read_byte_record(&mut ::csv::ByteRecord::new()),
            Ok(true)
        ),
        Ok(false) | Err(_) => false,
    }
}

impl<R: BufRead> CsvReader<R> {
    pub(super) fn new(input: R, max_line_len: usize) -> Result<Self, InputError> {
        let mut lines = LineReader::new(input, max_line_len);
        let mut header = ::csv::ByteRecord::new();
        match lines.next_line()? {
            Some(Line::Text(text)) if split(text, &mut header) => {}
            Some(_) => {
                return Err(InputError::CsvHeader(
                    "the first line is not a CSV header".into(),
                ));
            }
            None => return Err(InputError::CsvHeader("the log is empty".into())),
        }
        Ok(Self {
            lines,
            header,
            record: Record(::csv::ByteRecord::new()),
        })
    }

    pub(super) fn column(&self, name: &str) -> Result<usize, UnknownField> {
        self.header
            .iter()
            .position(|column| column == name.as_bytes())
            .ok_or_else(|| UnknownField {
                format: "CSV",
                name: name.to_owned(),
                hint: " in its header",
            })
    }

    pub(super) fn consumed(&self) -> u64 {
        self.lines.consumed()
    }

    /// The next record with its line number, or `None` at the end.
    #[allow(clippy::type_complexity)]
    pub(super) fn next_record(&mut self) -> io::Result<Option<(u64, Result<&Record, Malformed>)>> {
        let Some(line) = self.lines.next_line()? else {
            return Ok(None);
        };
        let result = match line {
            Line::TooLong => Err(Malformed::TooLong),
            Line::Text(text) if split(text, &mut self.record.0) => Ok(&self.record),
            Line::Text(_) => Err(Malformed::Syntax),
        };
        Ok(Some((self.lines.number(), result)))
    }
}

impl Fields for Record {
    type Handle = usize;

    fn get(&self, column: &usize) -> Option<Cow<'_, [u8]>> {
        self.0.get(*column).map(Cow::Borrowed)
    }
}
