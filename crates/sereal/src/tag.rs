//! Tag bytes of the Sereal body format (see `docs/sereal/sereal_spec.pod`, "Tags").

#![allow(missing_docs)]

pub const POS_0: u8 = 0x00;
pub const NEG_16: u8 = 0x10;
pub const VARINT: u8 = 0x20;
pub const ZIGZAG: u8 = 0x21;
pub const FLOAT: u8 = 0x22;
pub const DOUBLE: u8 = 0x23;
pub const LONG_DOUBLE: u8 = 0x24;
pub const UNDEF: u8 = 0x25;
pub const BINARY: u8 = 0x26;
pub const STR_UTF8: u8 = 0x27;
pub const REFN: u8 = 0x28;
pub const REFP: u8 = 0x29;
pub const HASH: u8 = 0x2a;
pub const ARRAY: u8 = 0x2b;
pub const OBJECT: u8 = 0x2c;
pub const OBJECTV: u8 = 0x2d;
pub const ALIAS: u8 = 0x2e;
pub const COPY: u8 = 0x2f;
pub const WEAKEN: u8 = 0x30;
pub const REGEXP: u8 = 0x31;
pub const OBJECT_FREEZE: u8 = 0x32;
pub const OBJECTV_FREEZE: u8 = 0x33;
pub const NO: u8 = 0x34;
pub const YES: u8 = 0x35;
pub const RESERVED_0: u8 = 0x36;
pub const RESERVED_1: u8 = 0x37;
pub const FLOAT_128: u8 = 0x38;
pub const CANONICAL_UNDEF: u8 = 0x39;
pub const FALSE: u8 = 0x3a;
pub const TRUE: u8 = 0x3b;
pub const MANY: u8 = 0x3c;
pub const PACKET_START: u8 = 0x3d;
pub const EXTEND: u8 = 0x3e;
pub const PAD: u8 = 0x3f;
pub const ARRAYREF_0: u8 = 0x40;
pub const HASHREF_0: u8 = 0x50;
pub const SHORT_BINARY_0: u8 = 0x60;

/// The "track" flag: the item at this offset is referenced again later (REFP / ALIAS).
pub const TRACK_FLAG: u8 = 0x80;

/// Human name of a tag (track flag ignored), for `--dump` and error messages.
pub fn name(tag: u8) -> &'static str {
    match tag & 0x7f {
        0x00..=0x0f => "POS",
        0x10..=0x1f => "NEG",
        VARINT => "VARINT",
        ZIGZAG => "ZIGZAG",
        FLOAT => "FLOAT",
        DOUBLE => "DOUBLE",
        LONG_DOUBLE => "LONG_DOUBLE",
        UNDEF => "UNDEF",
        BINARY => "BINARY",
        STR_UTF8 => "STR_UTF8",
        REFN => "REFN",
        REFP => "REFP",
        HASH => "HASH",
        ARRAY => "ARRAY",
        OBJECT => "OBJECT",
        OBJECTV => "OBJECTV",
        ALIAS => "ALIAS",
        COPY => "COPY",
        WEAKEN => "WEAKEN",
        REGEXP => "REGEXP",
        OBJECT_FREEZE => "OBJECT_FREEZE",
        OBJECTV_FREEZE => "OBJECTV_FREEZE",
        NO => "NO",
        YES => "YES",
        RESERVED_0 | RESERVED_1 => "RESERVED",
        FLOAT_128 => "FLOAT_128",
        CANONICAL_UNDEF => "CANONICAL_UNDEF",
        FALSE => "FALSE",
        TRUE => "TRUE",
        MANY => "MANY",
        PACKET_START => "PACKET_START",
        EXTEND => "EXTEND",
        PAD => "PAD",
        0x40..=0x4f => "ARRAYREF",
        0x50..=0x5f => "HASHREF",
        _ => "SHORT_BINARY",
    }
}
