//! Values crossing the storage interface: what a parameter binds
//! (`ToSql`), what a column reads as (`FromSql`), in SQLite's five storage
//! classes. Both backends convert to and from these, so the domain code
//! never names a driver's types.

use super::error::{Error, Result};

/// A borrowed value: a parameter on its way in, a column on its way out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// An owned value, for parameter lists built at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Integer(v)
    }
}

/// Something that binds as a parameter.
pub trait ToSql {
    fn to_sql(&self) -> Result<ValueRef<'_>>;
}

impl ToSql for Value {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(match self {
            Value::Null => ValueRef::Null,
            Value::Integer(v) => ValueRef::Integer(*v),
            Value::Real(v) => ValueRef::Real(*v),
            Value::Text(s) => ValueRef::Text(s),
            Value::Blob(b) => ValueRef::Blob(b),
        })
    }
}

impl ToSql for ValueRef<'_> {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(*self)
    }
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        (**self).to_sql()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        match self {
            Some(v) => v.to_sql(),
            None => Ok(ValueRef::Null),
        }
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Text(self))
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Text(self))
    }
}

impl ToSql for [u8] {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Blob(self))
    }
}

impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Blob(self))
    }
}

impl ToSql for bool {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Integer(i64::from(*self)))
    }
}

impl ToSql for f64 {
    fn to_sql(&self) -> Result<ValueRef<'_>> {
        Ok(ValueRef::Real(*self))
    }
}

macro_rules! integer_to_sql {
    ($($t:ty),*) => {$(
        impl ToSql for $t {
            fn to_sql(&self) -> Result<ValueRef<'_>> {
                i64::try_from(*self)
                    .map(ValueRef::Integer)
                    .map_err(|_| Error::conversion(format!("{} does not fit in a 64-bit integer", self)))
            }
        }
    )*};
}
integer_to_sql!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

/// Something a column reads as.
pub trait FromSql: Sized {
    fn column_result(value: ValueRef<'_>) -> Result<Self>;
}

fn wrong_type(want: &str, got: ValueRef<'_>) -> Error {
    let got = match got {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    };
    Error::conversion(format!("expected {want}, read {got}"))
}

impl<T: FromSql> FromSql for Option<T> {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        match value {
            ValueRef::Null => Ok(None),
            v => T::column_result(v).map(Some),
        }
    }
}

impl FromSql for String {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        match value {
            ValueRef::Text(s) => Ok(s.to_string()),
            v => Err(wrong_type("text", v)),
        }
    }
}

impl FromSql for Vec<u8> {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        match value {
            ValueRef::Blob(b) => Ok(b.to_vec()),
            ValueRef::Text(s) => Ok(s.as_bytes().to_vec()),
            v => Err(wrong_type("a blob", v)),
        }
    }
}

impl FromSql for f64 {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        match value {
            ValueRef::Real(v) => Ok(v),
            ValueRef::Integer(v) => Ok(v as f64),
            v => Err(wrong_type("a number", v)),
        }
    }
}

impl FromSql for bool {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        match value {
            ValueRef::Integer(v) => Ok(v != 0),
            v => Err(wrong_type("an integer", v)),
        }
    }
}

impl FromSql for Value {
    fn column_result(value: ValueRef<'_>) -> Result<Self> {
        Ok(match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(v) => Value::Integer(v),
            ValueRef::Real(v) => Value::Real(v),
            ValueRef::Text(s) => Value::Text(s.to_string()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        })
    }
}

macro_rules! integer_from_sql {
    ($($t:ty),*) => {$(
        impl FromSql for $t {
            fn column_result(value: ValueRef<'_>) -> Result<Self> {
                match value {
                    ValueRef::Integer(v) => <$t>::try_from(v).map_err(|_| {
                        Error::conversion(format!("{v} is out of range for {}", stringify!($t)))
                    }),
                    v => Err(wrong_type("an integer", v)),
                }
            }
        }
    )*};
}
integer_from_sql!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);
