// Command franz drives franz-go (kgo and kadm) through one scenario against a Kafka
// bootstrap address and prints one JSON line per step on stdout:
//
//	{"step": "<name>", "error": "<text or empty>", "result": {...}}
//
// Every result is independent of the topic and group names and of the addresses, so a
// run straight to the broker and a run through kafkalens can be compared step by step.
// Records are keyed: the partitioner (murmur2, as Kafka's) puts a key on the same
// partition in every run, and each partition's records keep their order.
//
// Steps: client (the KIP-511 software name and version this client sends, as kgo says),
// create_topic (kadm), produce (idempotent, acks=all, headers, each compression codec),
// transaction (a committed and an aborted transaction), consume (a consumer group,
// read_committed, the classic protocol or KIP-848's with -group-protocol consumer),
// commit, offsets (the group's committed offsets and the partitions' end offsets,
// kadm), describe_group.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type step struct {
	Step   string `json:"step"`
	Error  string `json:"error"`
	Result any    `json:"result"`
}

func emit(name string, err error, result any) {
	s := step{Step: name, Result: result}
	if err != nil {
		s.Error = err.Error()
	}
	line, _ := json.Marshal(s)
	fmt.Println(string(line))
}

type produced struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

type consumed struct {
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
	Partition int32             `json:"partition"`
	Offset    int64             `json:"offset"`
}

// byKey orders produced records by key: results come back in the order the partitions'
// batches were answered, which differs from run to run.
func byKey(results map[string][]produced) map[string][]produced {
	for _, list := range results {
		sort.Slice(list, func(i, j int) bool { return list[i].Key < list[j].Key })
	}
	return results
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"gzip", kgo.GzipCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap address(es), comma-separated")
	topic := flag.String("topic", "", "topic to create and use")
	group := flag.String("group", "", "consumer group")
	perCodec := flag.Int("n", 20, "records produced with each compression codec")
	partitions := flag.Int("partitions", 3, "partitions of the topic")
	replicas := flag.Int("replicas", 1, "replication factor of the topic")
	protocol := flag.String("group-protocol", "classic", "classic, or consumer (KIP-848)")
	clientID := flag.String("client-id", "kafkalens-franz", "client.id")
	timeout := flag.Duration("timeout", 60*time.Second, "the whole run's deadline")
	flag.Parse()
	if *brokers == "" || *topic == "" || *group == "" {
		fmt.Fprintln(os.Stderr, "usage: franz -brokers HOST:PORT -topic T -group G")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	seeds := strings.Split(*brokers, ",")
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID(*clientID)}

	admin, err := kgo.NewClient(base...)
	if err != nil {
		emit("client", err, nil)
		os.Exit(1)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	software := admin.OptValues(kgo.SoftwareNameAndVersion)
	emit("client", nil, map[string]any{
		"software_name": software[0], "software_version": software[1], "client_id": *clientID,
	})

	created, err := adm.CreateTopic(ctx, int32(*partitions), int16(*replicas), nil, *topic)
	if err == nil {
		err = created.Err
	}
	emit("create_topic", err, map[string]any{"partitions": created.NumPartitions})
	if err != nil {
		os.Exit(0)
	}

	expected := produce(ctx, base, *topic, *perCodec)
	expected += transaction(ctx, base, *topic)
	consume(ctx, base, adm, *topic, *group, *protocol, expected)
}

// produce sends perCodec keyed records with each codec, from one producer per codec.
func produce(ctx context.Context, base []kgo.Opt, topic string, perCodec int) int {
	results := map[string][]produced{}
	var firstErr error
	count := 0
	for _, c := range codecs {
		opts := append(append([]kgo.Opt{}, base...),
			kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c.codec),
			kgo.RequiredAcks(kgo.AllISRAcks()))
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		var records []*kgo.Record
		for i := 0; i < perCodec; i++ {
			records = append(records, &kgo.Record{
				Key:   []byte(fmt.Sprintf("%s-%03d", c.name, i)),
				Value: []byte(fmt.Sprintf("value %s %d %s", c.name, i, strings.Repeat("x", i*7))),
				Headers: []kgo.RecordHeader{
					{Key: "codec", Value: []byte(c.name)},
					{Key: "index", Value: []byte(fmt.Sprint(i))},
				},
			})
		}
		for _, r := range cl.ProduceSync(ctx, records...) {
			if r.Err != nil {
				firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", c.name, r.Err))
				continue
			}
			count++
			results[c.name] = append(results[c.name], produced{string(r.Record.Key), r.Record.Partition, r.Record.Offset})
		}
		cl.Close()
	}
	emit("produce", firstErr, byKey(results))
	return count
}

// transaction commits 4 records and aborts 3; returns how many a read_committed
// consumer must see.
func transaction(ctx context.Context, base []kgo.Opt, topic string) int {
	opts := append(append([]kgo.Opt{}, base...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID("txn-"+topic))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		emit("transaction", err, nil)
		return 0
	}
	defer cl.Close()
	out := map[string][]produced{}
	run := func(name string, n int, commit kgo.TransactionEndTry) error {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		var records []*kgo.Record
		for i := 0; i < n; i++ {
			records = append(records, &kgo.Record{
				Key:   []byte(fmt.Sprintf("%s-%d", name, i)),
				Value: []byte(fmt.Sprintf("%s %d", name, i)),
			})
		}
		for _, r := range cl.ProduceSync(ctx, records...) {
			if r.Err != nil {
				return r.Err
			}
			out[name] = append(out[name], produced{string(r.Record.Key), r.Record.Partition, r.Record.Offset})
		}
		return cl.EndTransaction(ctx, commit)
	}
	err = run("committed", 4, kgo.TryCommit)
	if err == nil {
		err = run("aborted", 3, kgo.TryAbort)
	}
	emit("transaction", err, byKey(out))
	if err != nil {
		return 0
	}
	return 4
}

func consume(ctx context.Context, base []kgo.Opt, adm *kadm.Client, topic, group, protocol string, expected int) {
	opts := append(append([]kgo.Opt{}, base...),
		kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.RangeBalancer()))
	if protocol == "consumer" {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		emit("consume", err, nil)
		return
	}
	defer cl.Close()
	var got []consumed
	var fetchErr error
	for len(got) < expected && ctx.Err() == nil && fetchErr == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fetchErr = errors.Join(fetchErr, fmt.Errorf("%s[%d]: %w", t, p, err))
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			got = append(got, consumed{string(r.Key), string(r.Value), headers, r.Partition, r.Offset})
		})
	}
	if fetchErr == nil && len(got) < expected {
		fetchErr = fmt.Errorf("consumed %d of %d records: %v", len(got), expected, ctx.Err())
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	emit("consume", fetchErr, map[string]any{"records": got, "group_protocol": protocol})

	err = cl.CommitUncommittedOffsets(ctx)
	emit("commit", err, nil)

	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	ends, endErr := adm.ListEndOffsets(ctx, topic)
	if err == nil && endErr == nil {
		endErr = ends.Error()
	}
	offsets := map[string]map[string]int64{"committed": {}, "end": {}}
	committed.Each(func(o kadm.OffsetResponse) {
		offsets["committed"][fmt.Sprint(o.Partition)] = o.At
	})
	ends.Each(func(o kadm.ListedOffset) {
		offsets["end"][fmt.Sprint(o.Partition)] = o.Offset
	})
	emit("offsets", errors.Join(err, endErr), offsets)

	describe(ctx, adm, group, protocol)
}

func describe(ctx context.Context, adm *kadm.Client, group, protocol string) {
	if protocol == "consumer" {
		groups, err := adm.DescribeConsumerGroups(ctx, group)
		d := groups[group]
		if err == nil {
			err = d.Err
		}
		assigned := 0
		for _, m := range d.Members {
			for _, ps := range m.Assignment {
				assigned += len(ps)
			}
		}
		emit("describe_group", err, map[string]any{
			"state": d.State, "members": len(d.Members), "assignor": d.AssignorName,
			"assigned_partitions": assigned,
		})
		return
	}
	groups, err := adm.DescribeGroups(ctx, group)
	d := groups[group]
	if err == nil {
		err = d.Err
	}
	emit("describe_group", err, map[string]any{
		"state": d.State, "members": len(d.Members), "protocol_type": d.ProtocolType,
		"protocol": d.Protocol,
	})
}
