import { crc32, deflateSync } from 'node:zlib'

/** One PNG chunk: its length, type, data and CRC. */
function chunk (type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4)
  length.writeUInt32BE(data.length)
  const crc = Buffer.alloc(4)
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data])
  crc.writeUInt32BE(crc32(body))
  return Buffer.concat([length, body, crc])
}

/** A 1×1 red PNG, as a `data:` URL (the host sends it as MCP image content). */
export function redPixelPng (): string {
  // width 1, height 1, 8 bits per sample, truecolour, no interlace
  const header = Buffer.from([0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0])
  // one scanline: filter byte 0, then red
  const pixels = deflateSync(Buffer.from([0, 255, 0, 0]))
  const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header), chunk('IDAT', pixels), chunk('IEND', Buffer.alloc(0))])
  return `data:image/png;base64,${png.toString('base64')}`
}

/** A twentieth of a second of a 440 Hz tone (8 kHz, 16-bit mono WAV), as a `data:` URL (MCP audio content). */
export function toneWav (): string {
  const rate = 8000
  const samples = Buffer.alloc(2 * rate / 20)
  for (let i = 0; i < samples.length / 2; i++) samples.writeInt16LE(Math.round(8000 * Math.sin(2 * Math.PI * 440 * i / rate)), 2 * i)
  const header = Buffer.alloc(44)
  header.write('RIFF', 0, 'latin1')
  header.writeUInt32LE(36 + samples.length, 4)
  header.write('WAVEfmt ', 8, 'latin1')
  header.writeUInt32LE(16, 16) // the fmt chunk's size
  header.writeUInt16LE(1, 20) // PCM
  header.writeUInt16LE(1, 22) // one channel
  header.writeUInt32LE(rate, 24)
  header.writeUInt32LE(2 * rate, 28) // bytes a second
  header.writeUInt16LE(2, 32) // bytes a frame
  header.writeUInt16LE(16, 34) // bits a sample
  header.write('data', 36, 'latin1')
  header.writeUInt32LE(samples.length, 40)
  return `data:audio/wav;base64,${Buffer.concat([header, samples]).toString('base64')}`
}
