//! Events → Arrow → Parquet → Arrow → events: equal to the originals as JSON values (keys
//! sorted: the columns do not keep key order), for realistic events and for every awkward case
//! the schema rules name — mixed types, integers in float columns, strings where numbers were,
//! nested arrays and arrays of objects, mixed arrays, empty containers, nulls, Sereal-only
//! values, names that collide with the hidden columns, fields past the column cap, events that
//! are not hashes. Then projection, pruning and a schema kept across files.

use std::sync::Arc;

use sereal::{Key, Object, Value};
use sluice_columns::convert::{
    columns_for_field, from_batch, to_batch, Row, RowOut, TypeSchema, REST_COLUMN,
};
use sluice_columns::parquet_file::{write_file, FileQuery, ParquetFile, WriteOptions};
use sluice_columns::verify::canonical;
use sluice_gen::{GenConfig, Generator};

fn json(text: &str) -> Value {
    sereal::json::from_json_slice(text.as_bytes()).expect(text)
}

/// Writes `events` as one file with `schema` (observed first) and reads it all back.
fn round_trip(
    schema: &mut TypeSchema,
    events: &[Value],
    opts: &WriteOptions,
) -> (ParquetFile, Vec<RowOut>) {
    for e in events {
        schema.observe(e);
    }
    let rows: Vec<Row<'_>> = events
        .iter()
        .enumerate()
        .map(|(i, event)| Row {
            epoch: 1_700_000_000 + (i / 100) as i64,
            subtype: if i % 3 == 0 { "a" } else { "b" },
            chunk: "0",
            event,
        })
        .collect();
    let batches: Vec<_> = rows
        .chunks(1000)
        .map(|c| to_batch(schema, c).expect("to_batch"))
        .collect();
    let bytes = write_file(&batches, &[("k".into(), "v".into())], opts).expect("write");
    let file = ParquetFile::open(bytes.into()).expect("open");
    let mut out = Vec::new();
    for b in file.read(&FileQuery::all()).expect("read") {
        out.extend(from_batch(&b.expect("batch")).expect("from_batch"));
    }
    (file, out)
}

fn assert_same(events: &[Value], out: &[RowOut]) {
    assert_eq!(events.len(), out.len());
    for (i, (e, r)) in events.iter().zip(out).enumerate() {
        assert_eq!(canonical(e), canonical(&r.event), "event {i}");
    }
}

#[test]
fn generated_events_come_back_equal() {
    let events: Vec<Value> = Generator::new(GenConfig::mixed(7, 5000)).collect();
    let mut schema = TypeSchema::new();
    let (file, out) = round_trip(&mut schema, &events, &WriteOptions::default());
    assert_same(&events, &out);
    assert_eq!(file.metadata_value("k"), Some("v"));
    assert_eq!(out[0].epoch, 1_700_000_000);
    assert_eq!(out[1].subtype, "b");
    // Nested objects are STRUCT columns, not JSON text.
    let schema = file.arrow_schema();
    let timings = schema.field_with_name("timings").expect("timings");
    assert!(matches!(
        timings.data_type(),
        arrow_schema::DataType::Struct(_)
    ));
}

#[test]
fn awkward_values_are_kept() {
    let events = vec![
        json(
            r#"{"n":1,"f":1.5,"s":"x","b":true,"o":{"a":1,"b":[1,2]},"l":[{"k":1},{"k":2,"j":"z"}]}"#,
        ),
        // A string where the number was: the sibling column; a float where the integer was:
        // the column widens; an integer in a float column: noted in `_ints`.
        json(r#"{"n":"seven","f":2,"s":"y","o":{"a":2.5,"b":[]},"l":[]}"#),
        json(r#"{"n":9007199254740993,"f":-3,"o":{"a":3,"b":[3,null,4]},"l":[{"k":3.25}]}"#),
        // Conflicts inside objects, mixed arrays, nulls, empty containers: `_rest`.
        json(
            r#"{"o":{"a":"text","b":[1]},"mixed":[1,"a",true],"nothing":null,"e":{},"ea":[],"deep":[[1,2],[3]]}"#,
        ),
        json(r#"{"o":{"a":null},"b":1,"s":2,"_rest":"mine","_epoch":5,"x__str":"y","":"empty"}"#),
        json(r#"{"unicode ключ":"значение","emoji":"🙂","n":-1}"#),
        json(r#"[1,2,3]"#),
        json(r#"{}"#),
    ];
    let mut events = events;
    // Sereal-only values: a blessed object, non-UTF-8 bytes, an integer above i64::MAX, a
    // binary key.
    events.push(Value::Hash(vec![
        (
            Key::Utf8(Arc::from("obj")),
            Value::Object(Box::new(Object {
                class: "My::Class".into(),
                value: json(r#"{"a":1}"#),
                frozen: false,
            })),
        ),
        (
            Key::Utf8(Arc::from("bytes")),
            Value::Binary(vec![0xff, 0xfe, 0]),
        ),
        (Key::Utf8(Arc::from("big")), Value::UInt(u64::MAX)),
        (
            Key::Binary(Arc::from(&b"ascii"[..])),
            Value::Binary(b"text".to_vec()),
        ),
    ]));
    let mut schema = TypeSchema::new();
    let (file, out) = round_trip(&mut schema, &events, &WriteOptions::default());
    assert_same(&events, &out);
    // Sereal-only values come back as themselves, not as their JSON mapping.
    let last = &out.last().expect("row").event;
    assert!(matches!(last.get("obj"), Some(Value::Object(o)) if o.class == "My::Class"));
    assert!(matches!(last.get("bytes"), Some(Value::Binary(b)) if b == &[0xff, 0xfe, 0]));
    assert!(matches!(last.get("big"), Some(Value::UInt(u64::MAX))));
    // Typed columns stayed typed: `n` is an integer column with a string sibling.
    let names: Vec<String> = file
        .arrow_schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert!(
        names.contains(&"n".to_string()) && names.contains(&"n__str".to_string()),
        "{names:?}"
    );
    let n = file
        .arrow_schema()
        .field_with_name("n")
        .expect("n")
        .data_type()
        .clone();
    assert_eq!(n, arrow_schema::DataType::Int64);
    assert_eq!(
        file.arrow_schema()
            .field_with_name("f")
            .expect("f")
            .data_type(),
        &arrow_schema::DataType::Float64
    );
    // The 2^53 + 1 integer did not fit the float column exactly... `n` stayed an integer column,
    // so it is there as itself.
    assert!(matches!(
        out[2].event.get("n"),
        Some(Value::Int(9007199254740993))
    ));
    assert!(matches!(out[1].event.get("f"), Some(Value::Int(2))));
}

#[test]
fn columns_past_the_cap_travel_in_rest() {
    let events: Vec<Value> = (0..10)
        .map(|i| json(&format!(r#"{{"a{i}":{i},"common":"c{i}"}}"#)))
        .collect();
    let mut schema = TypeSchema::new().with_column_cap(3);
    let (file, out) = round_trip(&mut schema, &events, &WriteOptions::default());
    assert_same(&events, &out);
    assert_eq!(schema.len(), 3);
    assert!(file.arrow_schema().field_with_name("a9").is_err());
}

#[test]
fn schema_sticks_across_files_and_restarts() {
    let mut schema = TypeSchema::new();
    schema.observe(&json(r#"{"status":200,"path":"/"}"#));
    let saved = schema.to_json();
    let mut again = TypeSchema::from_json(&saved).expect("parse");
    assert_eq!(again, schema);
    // A later file where `status` is a string keeps the integer column (plus the sibling).
    let events = vec![
        json(r#"{"status":"OK","path":"/x"}"#),
        json(r#"{"status":404}"#),
    ];
    let (file, out) = round_trip(&mut again, &events, &WriteOptions::default());
    assert_same(&events, &out);
    assert_eq!(
        file.arrow_schema()
            .field_with_name("status")
            .expect("status")
            .data_type(),
        &arrow_schema::DataType::Int64
    );
    assert!(TypeSchema::from_json(b"{not json").is_err());
}

#[test]
fn projection_and_pruning() {
    let events: Vec<Value> = Generator::new(GenConfig::web(3, 20_000)).collect();
    let opts = WriteOptions {
        row_group_rows: 2000,
        ..WriteOptions::default()
    };
    let mut schema = TypeSchema::new();
    let (file, _) = round_trip(&mut schema, &events, &opts);
    // Only `status` (and what may hold it) is read.
    let schema = file.arrow_schema();
    let mut cols = vec!["_epoch".to_string(), "_subtype".into(), "_chunk".into()];
    cols.extend(columns_for_field(&schema, "status"));
    assert!(cols.contains(&REST_COLUMN.to_string()));
    let query = FileQuery {
        columns: Some(cols),
        ..FileQuery::all()
    };
    let mut rows = 0;
    for b in file.read(&query).expect("read") {
        for r in from_batch(&b.expect("batch")).expect("rows") {
            // `status` and what `_rest` holds (the nulls of this event), nothing else.
            let Value::Hash(h) = &r.event else {
                panic!("not a hash")
            };
            assert!(
                r.event.get("status").is_some() && r.event.get("path").is_none(),
                "{h:?}"
            );
            assert!(
                h.iter()
                    .all(|(k, v)| k.as_bytes() == b"status" || matches!(v, Value::Undef)),
                "{h:?}"
            );
            rows += 1;
        }
    }
    assert_eq!(rows, 20_000);
    // A time range reads only the row groups that meet it.
    let count = |q: &FileQuery| -> usize {
        file.read(q)
            .expect("read")
            .map(|b| b.expect("batch").num_rows())
            .sum()
    };
    let late = FileQuery {
        epoch_from: 1_700_000_150,
        epoch_to: 1_700_000_151,
        ..FileQuery::all()
    };
    // Rows are sorted by second: the `_epoch` column picks exactly that second's 100 rows.
    assert_eq!(count(&late), 100);
    // A needle reads only the row groups its bloom filter and statistics allow.
    let needle = events[12_345]
        .get("request_id")
        .and_then(Value::as_str)
        .expect("request id")
        .to_owned();
    let q = FileQuery {
        string_equals: vec![("request_id".into(), needle.clone())],
        ..FileQuery::all()
    };
    let found: Vec<RowOut> = file
        .read(&q)
        .expect("read")
        .flat_map(|b| from_batch(&b.expect("batch")).expect("rows"))
        .collect();
    assert!(
        found.len() <= 2000 * 2,
        "pruned to ~1 row group, read {}",
        found.len()
    );
    assert!(found
        .iter()
        .any(|r| r.event.get("request_id").and_then(Value::as_str) == Some(needle.as_str())));
    let none = FileQuery {
        string_equals: vec![("request_id".into(), "no-such-id".into())],
        ..FileQuery::all()
    };
    assert!(
        count(&none) <= 2000,
        "a needle no row holds reads almost nothing"
    );
}

#[test]
fn a_needle_in_rest_is_never_pruned_away() {
    // With a cap of one column, `request_id` travels in `_rest`: a needle on it must still
    // read the row groups that hold it.
    let events: Vec<Value> = (0..5000)
        .map(|i| json(&format!(r#"{{"a":{i},"request_id":"id-{i}"}}"#)))
        .collect();
    let opts = WriteOptions {
        row_group_rows: 500,
        ..WriteOptions::default()
    };
    let mut schema = TypeSchema::new().with_column_cap(1);
    let (file, out) = round_trip(&mut schema, &events, &opts);
    assert_same(&events, &out);
    let q = FileQuery {
        string_equals: vec![("request_id".into(), "id-4321".into())],
        ..FileQuery::all()
    };
    let found = file
        .read(&q)
        .expect("read")
        .flat_map(|b| from_batch(&b.expect("batch")).expect("rows"))
        .filter(|r| r.event.get("request_id").and_then(Value::as_str) == Some("id-4321"))
        .count();
    assert_eq!(found, 1);
}
