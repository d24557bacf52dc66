// Command kshim-go-probe connects to a Kafka-protocol endpoint with franz-go,
// completes ApiVersions and Metadata, and prints what it saw as JSON:
// the brokers, the controller, and the finalized features (name, level,
// epoch) from the ApiVersions response. It exits non-zero on any error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type feature struct {
	Name  string `json:"name"`
	Level int16  `json:"level"`
	Epoch int64  `json:"epoch"`
}

type supported struct {
	Name       string `json:"name"`
	MinVersion int16  `json:"min_version"`
	MaxVersion int16  `json:"max_version"`
}

type broker struct {
	NodeID int32  `json:"node_id"`
	Host   string `json:"host"`
	Port   int32  `json:"port"`
}

type topic struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
}

type output struct {
	ClusterID          string      `json:"cluster_id"`
	Controller         int32       `json:"controller"`
	Brokers            []broker    `json:"brokers"`
	Topics             []topic     `json:"topics,omitempty"`
	ApiVersionsVersion int16       `json:"api_versions_version"`
	ApiKeys            int         `json:"api_keys"`
	FinalizedEpoch     int64       `json:"finalized_epoch"`
	FinalizedFeatures  []feature   `json:"finalized_features"`
	SupportedFeatures  []supported `json:"supported_features"`
	UnknownTags        []uint32    `json:"unknown_tags"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kshim-go-probe: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	bootstrap := flag.String("bootstrap", "", "host:port to connect to")
	timeout := flag.Duration("timeout", 15*time.Second, "overall deadline")
	topicName := flag.String("topic", "", "also request metadata for this topic")
	flag.Parse()
	if *bootstrap == "" {
		fail("--bootstrap is required")
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(*bootstrap),
		kgo.DialTimeout(5*time.Second),
		kgo.RequestRetries(2),
	)
	if err != nil {
		fail("new client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	var out output

	// ApiVersions over the seed connection, decoded by kmsg.
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kshim-go-probe"
	req.ClientSoftwareVersion = "1.0.0"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		fail("ApiVersions: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		fail("ApiVersions error code %d: %v", resp.ErrorCode, err)
	}
	out.ApiVersionsVersion = resp.Version
	out.ApiKeys = len(resp.ApiKeys)
	out.FinalizedEpoch = resp.FinalizedFeaturesEpoch
	out.FinalizedFeatures = []feature{}
	for _, f := range resp.FinalizedFeatures {
		out.FinalizedFeatures = append(out.FinalizedFeatures, feature{
			Name: f.Name, Level: f.MaxVersionLevel, Epoch: resp.FinalizedFeaturesEpoch,
		})
	}
	sort.Slice(out.FinalizedFeatures, func(i, j int) bool {
		return out.FinalizedFeatures[i].Name < out.FinalizedFeatures[j].Name
	})
	out.SupportedFeatures = []supported{}
	for _, f := range resp.SupportedFeatures {
		out.SupportedFeatures = append(out.SupportedFeatures, supported{f.Name, f.MinVersion, f.MaxVersion})
	}
	sort.Slice(out.SupportedFeatures, func(i, j int) bool {
		return out.SupportedFeatures[i].Name < out.SupportedFeatures[j].Name
	})
	out.UnknownTags = []uint32{}
	resp.UnknownTags.Each(func(tag uint32, _ []byte) {
		out.UnknownTags = append(out.UnknownTags, tag)
	})
	sort.Slice(out.UnknownTags, func(i, j int) bool { return out.UnknownTags[i] < out.UnknownTags[j] })

	// Metadata through kadm.
	var md kadm.Metadata
	if *topicName != "" {
		md, err = adm.Metadata(ctx, *topicName)
	} else {
		md, err = adm.BrokerMetadata(ctx)
	}
	if err != nil {
		fail("Metadata: %v", err)
	}
	if len(md.Brokers) == 0 {
		fail("Metadata returned no brokers")
	}
	out.ClusterID = md.Cluster
	out.Controller = md.Controller
	for _, b := range md.Brokers {
		out.Brokers = append(out.Brokers, broker{b.NodeID, b.Host, b.Port})
	}
	for _, t := range md.Topics.Sorted() {
		e := ""
		if t.Err != nil {
			e = t.Err.Error()
		}
		out.Topics = append(out.Topics, topic{t.Topic, e})
	}

	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail("encode: %v", err)
	}
}
