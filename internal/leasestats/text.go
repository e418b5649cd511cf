package leasestats

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
)

// TextContentType is the content type of WriteText's output: Prometheus'
// text exposition format 0.0.4, which every scraper reads.
const TextContentType = "text/plain; version=0.0.4; charset=utf-8"

// FamilySamples is a family and its series, for WriteText.
type FamilySamples struct {
	Family
	Samples []Sample
}

// WriteText writes the families in Prometheus' text exposition format 0.0.4,
// as the Prometheus client's expfmt writes a registry's gathered families:
// the same lines, byte for byte, for the same families in the same order
// (the caller sorts them by name, as a registry does). A family without
// samples is left out.
func WriteText(w io.Writer, fams []FamilySamples) error {
	b := bufio.NewWriter(w)
	for _, f := range fams {
		if len(f.Samples) == 0 {
			continue
		}
		b.WriteString("# HELP ")
		b.WriteString(f.Name)
		b.WriteByte(' ')
		helpEscaper.WriteString(b, f.Help)
		b.WriteString("\n# TYPE ")
		b.WriteString(f.Name)
		b.WriteByte(' ')
		b.WriteString(f.Kind.String())
		b.WriteByte('\n')
		for _, s := range f.Samples {
			if f.Kind != Histogram {
				writeSample(b, f.Name, "", f.Labels, s.Labels, "", s.Value)
				continue
			}
			inf := false
			for i, le := range s.Bounds {
				writeSample(b, f.Name, "_bucket", f.Labels, s.Labels, formatFloat(le), float64(s.Counts[i]))
				inf = inf || math.IsInf(le, +1)
			}
			if !inf {
				writeSample(b, f.Name, "_bucket", f.Labels, s.Labels, "+Inf", float64(s.Count))
			}
			writeSample(b, f.Name, "_sum", f.Labels, s.Labels, "", s.Sum)
			writeSample(b, f.Name, "_count", f.Labels, s.Labels, "", float64(s.Count))
		}
	}
	return b.Flush()
}

// writeSample writes one line: name+suffix{labels[,le="le"]} value.
func writeSample(b *bufio.Writer, name, suffix string, labels, values []string, le string, v float64) {
	b.WriteString(name)
	b.WriteString(suffix)
	if len(labels) > 0 || le != "" {
		b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l)
			b.WriteString(`="`)
			valueEscaper.WriteString(b, values[i])
			b.WriteByte('"')
		}
		if le != "" {
			if len(labels) > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`le="`)
			b.WriteString(le)
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
}

// formatFloat writes a value as the text format does: the shortest decimal
// that reads back as the same float64, "+Inf", "-Inf" or "NaN".
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)
