package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/dialect"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// dialectFlags are the options that speak a switch's language: --as writes
// one, --from reads one.
type dialectFlags struct {
	as, iface, portBuffer string
	from, file, sonicPort string
}

func (df *dialectFlags) registerAs(fs *flag.FlagSet) {
	fs.StringVar(&df.as, "as", "", "")
	fs.StringVar(&df.iface, "interface", "", "")
	fs.StringVar(&df.portBuffer, "port-buffer", "", "")
}

func (df *dialectFlags) registerFrom(fs *flag.FlagSet) {
	fs.StringVar(&df.from, "from", "", "")
	fs.StringVar(&df.file, "file", "", "")
	fs.StringVar(&df.sonicPort, "sonic-port", "", "")
}

// dialect is --as and the options that go with it; "" without --as.
func (df *dialectFlags) dialect() (dialect.Dialect, dialect.Options, error) {
	var opt dialect.Options
	if df.as == "" {
		if df.iface != "" || df.portBuffer != "" {
			return "", opt, usagef("--interface and --port-buffer go with --as DIALECT")
		}
		return "", opt, nil
	}
	d, err := dialect.Parse(df.as)
	if err != nil {
		return "", opt, usagef("--as %s: want %s", df.as, dialect.Names())
	}
	opt.Interface = df.iface
	if df.portBuffer != "" {
		if d != dialect.Junos {
			return "", opt, usagef("--port-buffer %s: only --as junos takes it (its buffer-size percentages)", df.portBuffer)
		}
		b, err := units.ParseSize(df.portBuffer)
		if err != nil || b == 0 {
			return "", opt, usagef("--port-buffer %s: want a size greater than 0, like 32mb", df.portBuffer)
		}
		opt.PortBufferBytes = b
	}
	return d, opt, nil
}

// readFrom reads --from sonic --file FILE; nil without --from. src names
// the file for headers.
func (df *dialectFlags) readFrom() (cfg *qdisc.Config, src string, err error) {
	if df.from == "" {
		if df.file != "" || df.sonicPort != "" {
			return nil, "", usagef("--file and --sonic-port go with --from sonic")
		}
		return nil, "", nil
	}
	d, err := dialect.Parse(df.from)
	if err != nil {
		return nil, "", usagef("--from %s: want sonic (the one dialect read back)", df.from)
	}
	if d != dialect.SONiC {
		return nil, "", usagef("--from %s: only sonic is read back; eos, nxos and junos are written only (show --as)", df.from)
	}
	if df.file == "" {
		return nil, "", usagef("--from sonic needs --file FILE (a config_db.json; - for stdin)")
	}
	r := io.Reader(os.Stdin)
	src = "stdin (sonic)"
	if df.file != "-" {
		f, err := os.Open(df.file)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		r, src = f, df.file+" (sonic)"
	}
	c, err := dialect.ParseSONiCPort(r, df.sonicPort)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", df.file, err)
	}
	return &c, src, nil
}

// takeFrom is the port's configuration cur replaced by a file's: SONiC has
// no class for non-IP frames, so cur's stays, and cur's class names where
// the file gives none.
func takeFrom(cur, file qdisc.Config) qdisc.Config {
	file.DefaultClass = cur.DefaultClass
	for i := range file.Classes {
		if file.Classes[i].Name == "" {
			file.Classes[i].Name = cur.Classes[i].Name
		}
	}
	return file
}

// change is what configure and show make a configuration from: the class
// options, --rate and --from's file.
type change struct {
	edits *qdisc.Edits
	rate  units.Rate    // 0: no --rate
	from  *qdisc.Config // --from's file, or nil
	src   string        // where from came from
}

// changeFlags are the options a configuration is made from: the class
// options, --rate and --from sonic --file FILE.
type changeFlags struct {
	cf   classFlags
	df   dialectFlags
	rate string
}

func (f *changeFlags) register(fs *flag.FlagSet) {
	f.cf.register(fs)
	f.df.registerFrom(fs)
	fs.StringVar(&f.rate, "rate", "", "")
}

// given says whether any of the options was given.
func (f *changeFlags) given() bool {
	return f.rate != "" || f.df.from != "" || f.df.file != "" || !f.cf.empty()
}

// read reads the options and the file, before any port is opened: a bad
// one changes nothing.
func (f *changeFlags) read() (ch change, err error) {
	if f.rate != "" {
		if ch.rate, err = parseRateFlag(f.rate); err != nil {
			return change{}, err
		}
	}
	if ch.edits, err = f.cf.edits(); err != nil {
		return change{}, err
	}
	if ch.from, ch.src, err = f.df.readFrom(); err != nil {
		return change{}, err
	}
	return ch, nil
}

func (ch change) empty() bool { return ch.edits.Empty() && ch.rate == 0 && ch.from == nil }

func (cf *classFlags) empty() bool {
	return len(cf.tc) == 0 && len(cf.dscp) == 0 && cf.defaultClass == ""
}

// showOffline is show without --dev: a configuration from --rate or
// --from, with the class options on top.
func showOffline(w io.Writer, cf *changeFlags, netns string, js bool, d dialect.Dialect, opt dialect.Options) error {
	if netns != "" {
		return usagef("--netns goes with --dev")
	}
	ch, err := cf.read()
	if err != nil {
		return err
	}
	var cfg qdisc.Config
	src := ch.src
	switch {
	case ch.from != nil:
		cfg = *ch.from
		if ch.rate != 0 {
			cfg.Rate = ch.rate
		}
	case ch.rate != 0:
		cfg, src = qdisc.DefaultConfig(ch.rate), "portctl's defaults"
	default:
		return usagef("--dev is required (the port device, e.g. --dev swp0), or --rate RATE or --from sonic --file FILE to print a configuration without a port")
	}
	if err := ch.edits.Apply(&cfg); err != nil {
		return usageError{fmt.Errorf("invalid configuration: %w", err)}
	}
	switch {
	case d != "":
		opt.Source = src
		return printDialect(w, &cfg, d, opt)
	case js:
		return printJSON(w, cfg)
	}
	renderConfig(w, src, &cfg)
	return nil
}

// printDialect prints cfg in d; what d cannot express is the error.
func printDialect(w io.Writer, cfg *qdisc.Config, d dialect.Dialect, opt dialect.Options) error {
	out, err := dialect.Render(cfg, d, opt)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, out.Text)
	return err
}
