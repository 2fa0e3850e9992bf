//! `GetXdbcTypeInfo`: the SQL types a Quiver column can have, as JDBC's and ODBC's
//! `getTypeInfo` describe them (the Flight SQL JDBC driver asks for this when a tool
//! opens a connection's metadata).

use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{Nullable, Searchable, XdbcDataType, XdbcDatetimeSubcode};

/// Every type a stored column or a query's common result has: `time` (timestamp),
/// tags and string fields (varchar), integer, unsigned, float and boolean fields.
pub fn xdbc_type_info() -> Result<XdbcTypeInfoData, FlightError> {
    let mut builder = XdbcTypeInfoDataBuilder::new();
    let plain = |name: &str, data_type: XdbcDataType| XdbcTypeInfo {
        type_name: name.to_string(),
        data_type,
        nullable: Nullable::NullabilityNullable,
        searchable: Searchable::Basic,
        local_type_name: Some(name.to_string()),
        sql_data_type: data_type,
        ..XdbcTypeInfo::default()
    };
    builder.append(XdbcTypeInfo {
        column_size: Some(1),
        ..plain("BOOLEAN", XdbcDataType::XdbcBit)
    });
    builder.append(XdbcTypeInfo {
        column_size: Some(19),
        unsigned_attribute: Some(false),
        num_prec_radix: Some(10),
        fixed_prec_scale: true,
        minimum_scale: Some(0),
        maximum_scale: Some(0),
        ..plain("BIGINT", XdbcDataType::XdbcBigint)
    });
    builder.append(XdbcTypeInfo {
        column_size: Some(20),
        unsigned_attribute: Some(true),
        num_prec_radix: Some(10),
        fixed_prec_scale: true,
        minimum_scale: Some(0),
        maximum_scale: Some(0),
        ..plain("BIGINT UNSIGNED", XdbcDataType::XdbcBigint)
    });
    builder.append(XdbcTypeInfo {
        column_size: Some(15),
        unsigned_attribute: Some(false),
        num_prec_radix: Some(2),
        ..plain("DOUBLE", XdbcDataType::XdbcDouble)
    });
    builder.append(XdbcTypeInfo {
        column_size: Some(i32::MAX),
        literal_prefix: Some("'".to_string()),
        literal_suffix: Some("'".to_string()),
        case_sensitive: true,
        searchable: Searchable::Full,
        ..plain("VARCHAR", XdbcDataType::XdbcVarchar)
    });
    builder.append(XdbcTypeInfo {
        // `YYYY-MM-DD HH:MM:SS.fffffffff`.
        column_size: Some(29),
        literal_prefix: Some("TIMESTAMP '".to_string()),
        literal_suffix: Some("'".to_string()),
        minimum_scale: Some(0),
        maximum_scale: Some(9),
        sql_data_type: XdbcDataType::XdbcDatetime,
        datetime_subcode: Some(XdbcDatetimeSubcode::XdbcSubcodeTimestamp),
        ..plain("TIMESTAMP", XdbcDataType::XdbcTimestamp)
    });
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::AsArray;

    #[test]
    fn every_column_type_is_listed_and_one_can_be_asked_for() {
        let info = xdbc_type_info().unwrap();
        let all = info.record_batch(None).unwrap();
        let names: Vec<&str> = all
            .column_by_name("type_name")
            .unwrap()
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        for name in [
            "BOOLEAN",
            "BIGINT",
            "BIGINT UNSIGNED",
            "DOUBLE",
            "VARCHAR",
            "TIMESTAMP",
        ] {
            assert!(names.contains(&name), "{names:?}");
        }
        let timestamps = info
            .record_batch(XdbcDataType::XdbcTimestamp as i32)
            .unwrap();
        assert_eq!(timestamps.num_rows(), 1);
    }
}
