//! Comma-separated values with a header row.

use std::{borrow::Cow, io};

use super::{Fields, Malformed, UnknownField};

pub(super) struct CsvReader<R> {
    reader: ::csv::Reader<R>,
    header: ::csv::ByteRecord,
    record: Record,
}

pub(super) struct Record(::csv::ByteRecord);

impl<R: io::Read> CsvReader<R> {
    pub(super) fn new(input: R) -> Result<Self, super::InputError> {
        let mut reader = ::csv::ReaderBuilder::new()
            .has_headers(true)
            // A short or long row is a malformed line, not the end of the run.
            .flexible(true)
            .from_reader(input);
        let header = reader
            .byte_headers()
            .map_err(|error| super::InputError::CsvHeader(error.to_string()))?
            .clone();
        Ok(Self {
            reader,
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
        self.reader.position().byte()
    }

    /// The next record with its line number, or `None` at the end.
    #[allow(clippy::type_complexity)]
    pub(super) fn next_record(&mut self) -> io::Result<Option<(u64, Result<&Record, Malformed>)>> {
        let line = self.reader.position().line();
        match self.reader.read_byte_record(&mut self.record.0) {
            Ok(false) => Ok(None),
            Ok(true) => {
                let line = self.record.0.position().map_or(line, ::csv::Position::line);
                Ok(Some((line, Ok(&self.record))))
            }
            Err(error) => match error.into_kind() {
                ::csv::ErrorKind::Io(error) => Err(error),
                _ => Ok(Some((line, Err(Malformed::Syntax)))),
            },
        }
    }
}

impl Fields for Record {
    type Handle = usize;

    fn get(&self, column: &usize) -> Option<Cow<'_, [u8]>> {
        self.0.get(*column).map(Cow::Borrowed)
    }
}
