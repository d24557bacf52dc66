// Command kshim-go-client produces or consumes records with franz-go (kgo), for the
// proxy interop tests. It prints one JSON object on stdout and exits non-zero on error.
//
//	kshim-go-client --bootstrap B --topic T produce --count N --prefix P
//	    Produces N records with values P-0 .. P-(N-1) (acks=all; kgo is idempotent by
//	    default) and prints {"acked":[values...]} once every record is acknowledged.
//	kshim-go-client --bootstrap B --topic T consume --group G --count N [--drain D]
//	    Joins group G, consumes from the start until N records have arrived, keeps
//	    polling for D more to catch extras or duplicates, commits, leaves the group and
//	    prints {"records":[{"partition":P,"offset":O,"value":V}...]}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kshim-go-client: "+format+"\n", args...)
	os.Exit(1)
}

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
}

func main() {
	global := flag.NewFlagSet("kshim-go-client", flag.ExitOnError)
	bootstrap := global.String("bootstrap", "", "host:port[,host:port] to bootstrap from")
	topic := global.String("topic", "", "topic to produce to or consume from")
	timeout := global.Duration("timeout", 60*time.Second, "overall deadline")
	if err := global.Parse(os.Args[1:]); err != nil {
		fail("%v", err)
	}
	if *bootstrap == "" || *topic == "" || global.NArg() < 1 {
		fail("usage: --bootstrap B --topic T produce|consume [flags]")
	}
	mode, rest := global.Arg(0), global.Args()[1:]

	sub := flag.NewFlagSet(mode, flag.ExitOnError)
	count := sub.Int("count", 100, "records to produce or to wait for")
	prefix := sub.String("prefix", "franz", "value prefix (produce)")
	group := sub.String("group", "", "consumer group (consume)")
	drain := sub.Duration("drain", 2*time.Second, "extra polling after --count records (consume)")
	if err := sub.Parse(rest); err != nil {
		fail("%v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.DialTimeout(5 * time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}

	enc := json.NewEncoder(os.Stdout)
	switch mode {
	case "produce":
		cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(*topic))...)
		if err != nil {
			fail("new client: %v", err)
		}
		defer cl.Close()
		rs := make([]*kgo.Record, *count)
		for i := range rs {
			rs[i] = kgo.StringRecord(fmt.Sprintf("%s-%d", *prefix, i))
		}
		results := cl.ProduceSync(ctx, rs...)
		acked := []string{}
		var errs []string
		for _, r := range results {
			if r.Err != nil {
				errs = append(errs, r.Err.Error())
				continue
			}
			acked = append(acked, string(r.Record.Value))
		}
		if len(errs) > 0 {
			fail("%d of %d records failed, first: %s", len(errs), len(rs), errs[0])
		}
		if err := enc.Encode(map[string]any{"acked": acked}); err != nil {
			fail("encode: %v", err)
		}

	case "consume":
		if *group == "" {
			fail("consume needs --group")
		}
		cl, err := kgo.NewClient(append(opts,
			kgo.ConsumerGroup(*group),
			kgo.ConsumeTopics(*topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(500*time.Millisecond),
			kgo.DisableAutoCommit(),
		)...)
		if err != nil {
			fail("new client: %v", err)
		}
		got := []record{}
		var drainUntil time.Time
		for {
			if !drainUntil.IsZero() && time.Now().After(drainUntil) {
				break
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fetches := cl.PollFetches(pctx)
			pcancel()
			if fetches.IsClientClosed() {
				fail("client closed while consuming")
			}
			for _, fe := range fetches.Errors() {
				if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
					continue
				}
				fmt.Fprintf(os.Stderr, "kshim-go-client: fetch error %s[%d]: %v\n", fe.Topic, fe.Partition, fe.Err)
			}
			fetches.EachRecord(func(r *kgo.Record) {
				got = append(got, record{r.Partition, r.Offset, string(r.Value)})
			})
			if ctx.Err() != nil {
				cl.Close()
				fail("timed out with %d of %d records", len(got), *count)
			}
			if drainUntil.IsZero() && len(got) >= *count {
				drainUntil = time.Now().Add(*drain)
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			fail("commit: %v", err)
		}
		cl.LeaveGroup()
		cl.Close()
		if err := enc.Encode(map[string]any{"records": got}); err != nil {
			fail("encode: %v", err)
		}

	default:
		fail("unknown mode %q (produce or consume)", mode)
	}
}
