//! A single-column payload's values, decoded page by page without Arrow: the path every key of
//! a backup takes, and every delete of a one-column delta log.
//!
//! Parquet's reader makes a zstd compressor and decompressor for every column chunk it reads,
//! and making each asks the CPU for its features (`cpuid`). In a virtual machine that
//! instruction traps to the hypervisor (about 7 µs here, three a context): some 40 µs a chunk,
//! against a key column of a few thousand rows that decodes in less. A backup of 1,000
//! collections has tens of thousands of such chunks. So a zstd chunk's pages are read as they
//! are stored and decompressed here, by one decompressor a thread, kept for the thread's life.
//! Every other codec goes through Parquet's own.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use milvus_proto::schema::DataType;
use parquet::arrow::parquet_to_arrow_schema;
use parquet::basic::Compression;
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{ByteArrayType, DataType as ParquetType, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::serialized_reader::SerializedPageReader;

use super::Error;
use super::payload::check_one_column;

/// Rows decoded at a time.
const BATCH: usize = 8192;

thread_local! {
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Calls `each` with every value of `payload`'s one column, in order, `None` for a null; the
/// column's Arrow type checked against `data_type` as the Arrow reader would see it, and its
/// Parquet type against `T`.
pub(super) fn each_value<T: ParquetType>(
    payload: &[u8],
    data_type: DataType,
    each: impl FnMut(Option<&T::T>) -> Result<(), Error>,
) -> Result<(), Error> {
    super::payload::decoding(|| decode::<T>(payload, data_type, each))
}

fn decode<T: ParquetType>(
    payload: &[u8],
    data_type: DataType,
    mut each: impl FnMut(Option<&T::T>) -> Result<(), Error>,
) -> Result<(), Error> {
    let bad = |e: ParquetError| Error::Payload(e.to_string());
    let bytes = Bytes::copy_from_slice(payload);
    let metadata = ParquetMetaDataReader::new()
        .parse_and_finish(&bytes)
        .map_err(bad)?;
    let file = metadata.file_metadata();
    let schema =
        parquet_to_arrow_schema(file.schema_descr(), file.key_value_metadata()).map_err(bad)?;
    check_one_column(&schema, data_type)?;
    let descr = file.schema_descr().column(0);
    if descr.physical_type() != T::get_physical_type() || descr.max_rep_level() != 0 {
        return Err(Error::Payload(format!(
            "a column stored as {} where {} data was expected",
            descr.physical_type(),
            data_type.as_str_name()
        )));
    }
    let max_def = descr.max_def_level();
    let (mut values, mut levels) = (Vec::new(), Vec::new());
    for group in metadata.row_groups() {
        let chunk = group.column(0);
        let rows = usize::try_from(group.num_rows())
            .map_err(|_| Error::Payload("a negative row count in a row group".into()))?;
        let reader = Arc::new(bytes.clone());
        let pages: Box<dyn PageReader> = if matches!(chunk.compression(), Compression::ZSTD(_)) {
            // Read as stored: the same chunk, said to be uncompressed.
            let stored = (chunk.clone().into_builder())
                .set_compression(Compression::UNCOMPRESSED)
                .build()
                .map_err(bad)?;
            // A page's size is an i32 in the format; the footer's sum may be damaged.
            let limit = chunk.uncompressed_size().clamp(0, i32::MAX.into()) as usize;
            Box::new(Zstd {
                pages: SerializedPageReader::new(reader, &stored, rows, None).map_err(bad)?,
                limit,
            })
        } else {
            Box::new(SerializedPageReader::new(reader, chunk, rows, None).map_err(bad)?)
        };
        let mut column = ColumnReaderImpl::<T>::new(descr.clone(), pages);
        loop {
            values.clear();
            levels.clear();
            let def = (max_def > 0).then_some(&mut levels);
            let (records, _, _) = column
                .read_records(BATCH, def, None, &mut values)
                .map_err(bad)?;
            if records == 0 {
                break;
            }
            if max_def == 0 {
                values.iter().try_for_each(|v| each(Some(v)))?;
            } else {
                let mut present = values.iter();
                for level in &levels {
                    each(if *level == max_def {
                        present.next()
                    } else {
                        None
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// A zstd column chunk's pages, read as stored and decompressed by this thread's decompressor.
struct Zstd<P> {
    pages: P,
    /// The chunk's uncompressed size as its metadata says: no page decompresses to more.
    limit: usize,
}

impl<P: PageReader> Zstd<P> {
    /// `stored` less its first `kept` bytes (a version 2 page's levels, never compressed)
    /// decompressed, after those bytes.
    fn decompress(&self, stored: Bytes, kept: usize) -> parquet::errors::Result<Bytes> {
        let Some(frame) = stored.get(kept..) else {
            return Err(ParquetError::General(format!(
                "a page of {} bytes with {kept} bytes of levels",
                stored.len()
            )));
        };
        // A page of only nulls has nothing to decompress.
        if frame.is_empty() {
            return Ok(stored);
        }
        let size = match zstd::zstd_safe::get_frame_content_size(frame) {
            Ok(Some(size)) => usize::try_from(size).unwrap_or(usize::MAX),
            // A frame that does not say its size: at most what the chunk holds.
            Ok(None) => self.limit,
            Err(_) => {
                return Err(ParquetError::General(
                    "a page that is not a zstd frame".into(),
                ));
            }
        };
        if size > self.limit {
            return Err(ParquetError::General(format!(
                "a page of {size} bytes in a column chunk of {} bytes",
                self.limit
            )));
        }
        let mut out = Vec::with_capacity(kept + size);
        out.extend_from_slice(&stored[..kept]);
        DECOMPRESSOR
            .with_borrow_mut(|decompressor| {
                let decompressor = match decompressor {
                    Some(d) => d,
                    None => decompressor.insert(zstd::bulk::Decompressor::new()?),
                };
                let mut cursor = std::io::Cursor::new(&mut out);
                cursor.set_position(kept as u64);
                decompressor.decompress_to_buffer(frame, &mut cursor)
            })
            .map_err(|e| ParquetError::General(format!("a zstd page does not decompress: {e}")))?;
        Ok(Bytes::from(out))
    }
}

impl<P: PageReader> Iterator for Zstd<P> {
    type Item = parquet::errors::Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<P: PageReader> PageReader for Zstd<P> {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        let Some(mut page) = self.pages.get_next_page()? else {
            return Ok(None);
        };
        match &mut page {
            Page::DataPage { buf, .. } | Page::DictionaryPage { buf, .. } => {
                *buf = self.decompress(std::mem::take(buf), 0)?;
            }
            Page::DataPageV2 {
                buf,
                def_levels_byte_len,
                rep_levels_byte_len,
                is_compressed,
                ..
            } if *is_compressed => {
                let kept = *def_levels_byte_len as usize + *rep_levels_byte_len as usize;
                *buf = self.decompress(std::mem::take(buf), kept)?;
                *is_compressed = false;
            }
            Page::DataPageV2 { .. } => {}
        }
        Ok(Some(page))
    }

    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        self.pages.peek_next_page()
    }

    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        self.pages.skip_next_page()
    }

    fn at_record_boundary(&mut self) -> parquet::errors::Result<bool> {
        self.pages.at_record_boundary()
    }
}

/// The values of an Int64 payload (RowIDs, timestamps, an Int64 primary key); a null is 0.
/// Decoded page by page: the keys of a whole backup are read so.
pub fn int64s(payload: &[u8]) -> Result<Vec<i64>, Error> {
    let mut out = Vec::new();
    each_value::<Int64Type>(payload, DataType::Int64, |v| {
        out.push(v.copied().unwrap_or_default());
        Ok(())
    })?;
    Ok(out)
}

/// The values of a string payload (a delta log's one-column form, a VarChar primary key); a
/// null is an empty string. Decoded page by page, as [`int64s`].
pub fn strings(payload: &[u8]) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    each_value::<ByteArrayType>(payload, DataType::String, |v| {
        let text = match v {
            Some(bytes) => std::str::from_utf8(bytes.data())
                .map_err(|e| Error::Payload(format!("a string that is not UTF-8: {e}")))?,
            None => "",
        };
        out.push(text.to_owned());
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::{WriterProperties, WriterVersion};

    use super::super::payload;
    use super::*;

    /// `column`, nullable, written with `compression` in Parquet's page format `version`, in row
    /// groups of 700 rows and pages of 100, dictionary encoded as the writer chooses.
    fn written(column: ArrayRef, compression: Compression, version: WriterVersion) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "val",
            column.data_type().clone(),
            true,
        )]));
        let properties = WriterProperties::builder()
            .set_compression(compression)
            .set_writer_version(version)
            .set_max_row_group_row_count(Some(700))
            .set_data_page_row_count_limit(100)
            .set_write_batch_size(50)
            .build();
        let mut out = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(properties))
            .expect("an in-memory writer opens");
        let batch = RecordBatch::try_new(schema, vec![column]).expect("a batch of its schema");
        writer.write(&batch).expect("written to memory");
        writer.close().expect("closed in memory");
        out
    }

    fn zstd() -> Compression {
        Compression::ZSTD(ZstdLevel::try_new(3).expect("a level"))
    }

    /// Every third value null, every fifth repeated (so that dictionary pages come too).
    fn ints() -> Vec<Option<i64>> {
        (0..2_000)
            .map(|i| (i % 3 != 0).then_some(if i % 5 == 0 { 7 } else { i * 1_000_003 }))
            .collect()
    }

    /// The values as the Arrow reader reads them, a null as `null`.
    fn through_arrow<T>(payload: &[u8], value: impl Fn(&ArrayRef, usize) -> T) -> Vec<Option<T>> {
        let mut out = Vec::new();
        for batch in payload::read(payload).expect("the Arrow reader reads it") {
            let column = batch.column(0);
            out.extend((0..column.len()).map(|i| column.is_valid(i).then(|| value(column, i))));
        }
        out
    }

    fn int_at(column: &ArrayRef, i: usize) -> i64 {
        column
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("int64")
            .value(i)
    }

    #[test]
    fn pages_read_here_are_what_the_arrow_reader_reads() {
        let ints = ints();
        let texts: Vec<Option<String>> = ints.iter().map(|v| v.map(|v| format!("k{v}"))).collect();
        for compression in [zstd(), Compression::UNCOMPRESSED] {
            for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
                let what = format!("{compression:?} {version:?}");
                let payload = written(
                    Arc::new(Int64Array::from(ints.clone())),
                    compression,
                    version,
                );
                let arrow = through_arrow(&payload, int_at);
                assert_eq!(arrow, ints, "{what}: the file holds the values");
                let want: Vec<i64> = ints.iter().map(|v| v.unwrap_or(0)).collect();
                assert_eq!(int64s(&payload), Ok(want), "{what}");

                let column: ArrayRef = Arc::new(StringArray::from(texts.clone()));
                let payload = written(column, compression, version);
                let want: Vec<String> = texts
                    .iter()
                    .map(|v| v.clone().unwrap_or_default())
                    .collect();
                assert_eq!(strings(&payload), Ok(want), "{what}");
            }
        }
    }

    /// The files of the test above hold what it means to cover: row groups, a dictionary page
    /// and several data pages in each chunk, in the page format asked for.
    #[test]
    fn the_written_files_have_the_pages_the_test_means() {
        for (version, v2) in [
            (WriterVersion::PARQUET_1_0, false),
            (WriterVersion::PARQUET_2_0, true),
        ] {
            let payload = Bytes::from(written(Arc::new(Int64Array::from(ints())), zstd(), version));
            let metadata = ParquetMetaDataReader::new()
                .parse_and_finish(&payload)
                .expect("a footer");
            assert_eq!(
                metadata.row_groups().len(),
                3,
                "row groups of 700 of 2,000 rows"
            );
            let chunk = metadata.row_group(0).column(0);
            assert!(matches!(chunk.compression(), Compression::ZSTD(_)));
            let pages = SerializedPageReader::new(Arc::new(payload.clone()), chunk, 700, None)
                .expect("the chunk's pages")
                .map(|page| page.expect("a page"))
                .collect::<Vec<_>>();
            let dictionary = pages.iter().filter(|p| !p.is_data_page()).count();
            let data = (pages.iter())
                .filter(|p| p.is_data_page() && matches!(p, Page::DataPageV2 { .. }) == v2);
            assert_eq!(dictionary, 1, "{version:?}");
            assert!(data.count() >= 7, "{version:?}: pages of 100 rows");
        }
    }

    #[test]
    fn a_damaged_zstd_page_is_refused() {
        let mut payload = written(
            Arc::new(Int64Array::from(ints())),
            zstd(),
            WriterVersion::PARQUET_1_0,
        );
        let magic = [0x28, 0xb5, 0x2f, 0xfd];
        let at = (payload.windows(4))
            .position(|w| w == magic)
            .expect("a zstd frame in the file");
        payload[at] ^= 0xff;
        let err = int64s(&payload).expect_err("a page that is not a frame");
        assert!(err.to_string().contains("zstd"), "{err}");
    }

    /// A payload damaged at any one byte reads or is refused; it never panics.
    #[test]
    fn a_payload_damaged_anywhere_never_panics() {
        let ints: Vec<Option<i64>> = ints().into_iter().take(150).collect();
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            let payload = written(Arc::new(Int64Array::from(ints.clone())), zstd(), version);
            for at in 0..payload.len() {
                let mut damaged = payload.clone();
                damaged[at] ^= 0x5a;
                let _ = int64s(&damaged);
                let _ = payload::read(&damaged);
            }
        }
    }

    #[test]
    fn a_column_of_another_type_is_refused() {
        let payload = written(
            Arc::new(StringArray::from(vec![Some("a")])),
            zstd(),
            WriterVersion::PARQUET_1_0,
        );
        assert!(int64s(&payload).is_err());
        let payload = written(
            Arc::new(Int64Array::from(vec![Some(1)])),
            zstd(),
            WriterVersion::PARQUET_1_0,
        );
        assert!(strings(&payload).is_err());
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let two = payload::write(&[("pk", ints.clone()), ("ts", ints)], zstd());
        let err = int64s(&two).expect_err("two columns");
        assert!(err.to_string().contains("2 columns, expected one"), "{err}");
    }
}
