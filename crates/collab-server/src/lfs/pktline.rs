//! git's pkt-line framing as git-lfs's SSH transfer uses it: four hex
//! digits of length (the four included) then the payload; `0000` is a
//! flush packet, `0001` a delimiter. A payload is at most
//! [`MAX_PAYLOAD`] bytes. Reads are bounded by that, so a hostile length
//! never makes the server allocate more.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The largest payload of one packet (65520 minus the length digits).
pub const MAX_PAYLOAD: usize = 65516;

/// One packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Flush,
    Delim,
    Data(Vec<u8>),
}

/// Why the stream is not pkt-lines (the conversation cannot go on).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("bad packet length {0:?}")]
    Length(String),
    #[error("the connection ended inside a packet")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The next packet; `None` when the stream ends between packets.
pub async fn read<R: AsyncRead + Unpin>(input: &mut R) -> Result<Option<Packet>, FrameError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match input.read(&mut head[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Truncated),
            n => got += n,
        }
    }
    let digits = std::str::from_utf8(&head).ok();
    let len = digits
        .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|d| usize::from_str_radix(d, 16).ok())
        .ok_or_else(|| FrameError::Length(String::from_utf8_lossy(&head).into_owned()))?;
    match len {
        0 => Ok(Some(Packet::Flush)),
        1 => Ok(Some(Packet::Delim)),
        // 2 (response end) and 3 are not used by this protocol; shorter
        // than its own header or longer than the maximum is not a packet.
        n if n < 4 || n - 4 > MAX_PAYLOAD => Err(FrameError::Length(
            String::from_utf8_lossy(&head).into_owned(),
        )),
        n => {
            let mut payload = vec![0u8; n - 4];
            input.read_exact(&mut payload).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    FrameError::Truncated
                } else {
                    FrameError::Io(e)
                }
            })?;
            Ok(Some(Packet::Data(payload)))
        }
    }
}

/// A text payload without its newline, if it is UTF-8.
pub fn text(payload: &[u8]) -> Option<&str> {
    let payload = payload.strip_suffix(b"\n").unwrap_or(payload);
    std::str::from_utf8(payload).ok()
}

/// Writes packets to a buffered output; [`Writer::end`] sends them.
pub struct Writer<W> {
    out: tokio::io::BufWriter<W>,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    pub fn new(out: W) -> Writer<W> {
        Writer {
            out: tokio::io::BufWriter::with_capacity(64 * 1024, out),
        }
    }

    /// One data packet (at most [`MAX_PAYLOAD`] bytes).
    pub async fn data(&mut self, payload: &[u8]) -> std::io::Result<()> {
        debug_assert!(payload.len() <= MAX_PAYLOAD);
        self.out
            .write_all(format!("{:04x}", payload.len() + 4).as_bytes())
            .await?;
        self.out.write_all(payload).await
    }

    /// One text line (a newline is added).
    pub async fn line(&mut self, text: &str) -> std::io::Result<()> {
        let mut payload = Vec::with_capacity(text.len() + 1);
        payload.extend_from_slice(text.as_bytes());
        payload.truncate(MAX_PAYLOAD - 1);
        payload.push(b'\n');
        self.data(&payload).await
    }

    pub async fn delim(&mut self) -> std::io::Result<()> {
        self.out.write_all(b"0001").await
    }

    /// A flush packet, and everything written so far sent.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(b"0000").await?;
        self.out.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(bytes: &[u8]) -> Result<Vec<Packet>, FrameError> {
        let mut input = bytes;
        let mut packets = Vec::new();
        while let Some(p) = read(&mut input).await? {
            packets.push(p);
        }
        Ok(packets)
    }

    #[tokio::test]
    async fn reads_what_it_writes() {
        let mut out = Vec::new();
        {
            let mut w = Writer::new(&mut out);
            w.line("version 1").await.unwrap();
            w.delim().await.unwrap();
            w.data(&[0, 1, 2]).await.unwrap();
            w.flush().await.unwrap();
        }
        assert_eq!(out, b"000eversion 1\n00010007\x00\x01\x020000");
        assert_eq!(
            all(&out).await.unwrap(),
            vec![
                Packet::Data(b"version 1\n".to_vec()),
                Packet::Delim,
                Packet::Data(vec![0, 1, 2]),
                Packet::Flush
            ]
        );
    }

    #[tokio::test]
    async fn refuses_what_is_not_a_packet() {
        for bad in [
            &b"zzzz"[..],
            b"0002",
            b"0003",
            b"fff1",
            b"+123",
            b"000axx",
            b"00",
        ] {
            assert!(all(bad).await.is_err(), "{bad:?}");
        }
    }
}
