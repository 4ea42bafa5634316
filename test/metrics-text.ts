/** One sample line of a Prometheus text exposition: its labels and value. */
export interface Sample {
  labels: Record<string, string>
  value: number
}

/** Every sample of metric `name` in `text` (`name{labels} value` lines). */
export function samples (text: string, name: string): Sample[] {
  const found: Sample[] = []
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue
    const match = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null || match[1] !== name) continue
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]))
    found.push({ labels, value: Number(match[3]) })
  }
  return found
}

/** The value of the first sample of `name` whose labels include `labels`, or undefined. */
export function sample (text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  return samples(text, name).find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value
}
