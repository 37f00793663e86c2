// Command sarama drives IBM/sarama through one scenario against a Kafka bootstrap
// address and prints one JSON line per step on stdout:
//
//	{"step": "<name>", "error": "<text or empty>", "result": {...}}
//
// As cmd/franz, every result is independent of the topic and group names and of the
// addresses, so a run straight to the broker and one through kafkalens compare.
//
// The full scenario (sarama's protocol Version -version, 4.0.0 unless told): client
// (the KIP-511 software name and version sarama sends), create_topic (ClusterAdmin),
// produce (idempotent, acks=all, headers, each compression codec), transaction (one
// committed, one aborted), consume (a classic consumer group, read_committed), commit,
// offsets (ListConsumerGroupOffsets and each partition's newest offset), describe_group.
//
// -legacy runs what a client pinned to an old Version does with a topic that exists:
// create another topic (ClusterAdmin), metadata, produce one record, consume partition 0
// from the oldest offset (until a record, an error, or a line on stdin); each step
// reports the error sarama gives. With an old
// -version (0.10.2.0, say) sarama sends request versions Kafka 4.0 removed (KIP-896):
// it keeps to the versions its Version allows even when the broker advertises only
// newer ones.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
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
	codec sarama.CompressionCodec
}{
	{"none", sarama.CompressionNone},
	{"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy},
	{"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

// softwareVersion is what sarama sends as its KIP-511 ClientSoftwareVersion: its
// version.go takes its own module's version from the build information, as here.
func softwareVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/IBM/sarama" && dep.Version != "" && dep.Version != "(devel)" {
				return dep.Version
			}
		}
	}
	return "dev"
}

func config(version sarama.KafkaVersion, clientID string) *sarama.Config {
	conf := sarama.NewConfig()
	conf.Version = version
	conf.ClientID = clientID
	conf.Net.DialTimeout = 10 * time.Second
	conf.Net.ReadTimeout = 15 * time.Second
	conf.Net.WriteTimeout = 10 * time.Second
	conf.Metadata.Retry.Max = 2
	conf.Metadata.Retry.Backoff = 200 * time.Millisecond
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Retry.Max = 2
	conf.Producer.Retry.Backoff = 200 * time.Millisecond
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Offsets.AutoCommit.Enable = false
	return conf
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap address(es), comma-separated")
	topic := flag.String("topic", "", "topic")
	group := flag.String("group", "", "consumer group")
	perCodec := flag.Int("n", 20, "records produced with each compression codec")
	partitions := flag.Int("partitions", 3, "partitions of the topic")
	replicas := flag.Int("replicas", 1, "replication factor of the topic")
	versionFlag := flag.String("version", "4.0.0", "sarama's Config.Version (the Kafka version it speaks)")
	clientID := flag.String("client-id", "kafkalens-sarama", "client.id")
	legacy := flag.Bool("legacy", false, "the steps of a client pinned to an old Version")
	timeout := flag.Duration("timeout", 60*time.Second, "the whole run's deadline")
	flag.Parse()
	if *brokers == "" || *topic == "" || *group == "" {
		fmt.Fprintln(os.Stderr, "usage: sarama -brokers HOST:PORT -topic T -group G")
		os.Exit(2)
	}
	version, err := sarama.ParseKafkaVersion(*versionFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs := strings.Split(*brokers, ",")
	emit("client", nil, map[string]any{
		"software_name": "sarama", "software_version": softwareVersion(),
		"client_id": *clientID, "protocol_version": version.String(),
	})
	conf := func() *sarama.Config { return config(version, *clientID) }
	if *legacy {
		runLegacy(ctx, addrs, conf, *topic)
		return
	}

	admin, err := sarama.NewClusterAdmin(addrs, conf())
	if err != nil {
		emit("create_topic", err, nil)
		return
	}
	defer admin.Close()
	err = admin.CreateTopic(*topic, &sarama.TopicDetail{
		NumPartitions: int32(*partitions), ReplicationFactor: int16(*replicas),
	}, false)
	emit("create_topic", err, map[string]any{"partitions": *partitions})
	if err != nil {
		return
	}
	expected := produce(addrs, conf, *topic, *perCodec)
	expected += transaction(addrs, conf, *topic)
	consume(ctx, addrs, conf, admin, *topic, *group, expected)
}

func produce(addrs []string, conf func() *sarama.Config, topic string, perCodec int) int {
	results := map[string][]produced{}
	var firstErr error
	count := 0
	for _, c := range codecs {
		cfg := conf()
		cfg.Producer.Compression = c.codec
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
		producer, err := sarama.NewSyncProducer(addrs, cfg)
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", c.name, err))
			continue
		}
		var messages []*sarama.ProducerMessage
		for i := 0; i < perCodec; i++ {
			messages = append(messages, &sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("%s-%03d", c.name, i)),
				Value: sarama.StringEncoder(fmt.Sprintf("value %s %d %s", c.name, i, strings.Repeat("x", i*7))),
				Headers: []sarama.RecordHeader{
					{Key: []byte("codec"), Value: []byte(c.name)},
					{Key: []byte("index"), Value: []byte(fmt.Sprint(i))},
				},
			})
		}
		if err := producer.SendMessages(messages); err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", c.name, err))
		}
		for _, m := range messages {
			if m.Offset >= 0 && m.Partition >= 0 {
				key, _ := m.Key.Encode()
				results[c.name] = append(results[c.name], produced{string(key), m.Partition, m.Offset})
				count++
			}
		}
		producer.Close()
	}
	emit("produce", firstErr, byKey(results))
	return count
}

func transaction(addrs []string, conf func() *sarama.Config, topic string) int {
	cfg := conf()
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = "txn-" + topic
	producer, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		emit("transaction", err, nil)
		return 0
	}
	defer producer.Close()
	out := map[string][]produced{}
	run := func(name string, n int, commit bool) error {
		if err := producer.BeginTxn(); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			m := &sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("%s-%d", name, i)),
				Value: sarama.StringEncoder(fmt.Sprintf("%s %d", name, i)),
			}
			partition, offset, err := producer.SendMessage(m)
			if err != nil {
				return err
			}
			out[name] = append(out[name], produced{fmt.Sprintf("%s-%d", name, i), partition, offset})
		}
		if commit {
			return producer.CommitTxn()
		}
		return producer.AbortTxn()
	}
	err = run("committed", 4, true)
	if err == nil {
		err = run("aborted", 3, false)
	}
	emit("transaction", err, byKey(out))
	if err != nil {
		return 0
	}
	return 4
}

// handler collects records from every claim until `expected` came, then commits.
type handler struct {
	mu       sync.Mutex
	got      []consumed
	expected int
	done     chan struct{}
	once     sync.Once
	commit   error
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			headers := map[string]string{}
			for _, hd := range m.Headers {
				headers[string(hd.Key)] = string(hd.Value)
			}
			sess.MarkMessage(m, "")
			h.mu.Lock()
			h.got = append(h.got, consumed{string(m.Key), string(m.Value), headers, m.Partition, m.Offset})
			full := len(h.got) >= h.expected
			h.mu.Unlock()
			if full {
				h.once.Do(func() {
					sess.Commit()
					close(h.done)
				})
			}
		}
	}
}

func consume(ctx context.Context, addrs []string, conf func() *sarama.Config, admin sarama.ClusterAdmin, topic, group string, expected int) {
	cfg := conf()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	var errs []error
	var errMu sync.Mutex
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup(addrs, group, cfg)
	if err != nil {
		emit("consume", err, nil)
		return
	}
	h := &handler{expected: expected, done: make(chan struct{})}
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		for e := range cg.Errors() {
			errMu.Lock()
			errs = append(errs, e)
			errMu.Unlock()
		}
	}()
	go func() {
		defer close(finished)
		for runCtx.Err() == nil {
			if err := cg.Consume(runCtx, []string{topic}, h); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
				return
			}
		}
	}()
	var consumeErr error
	select {
	case <-h.done:
	case <-ctx.Done():
		consumeErr = fmt.Errorf("consumed %d of %d records: %v", len(h.got), expected, ctx.Err())
	case <-finished:
		consumeErr = errors.New("the consumer group stopped")
	}
	h.mu.Lock()
	got := append([]consumed{}, h.got...)
	h.mu.Unlock()
	sort.Slice(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	errMu.Lock()
	consumeErr = errors.Join(append([]error{consumeErr}, errs...)...)
	errMu.Unlock()
	emit("consume", consumeErr, map[string]any{"records": got, "group_protocol": "classic"})
	emit("commit", nil, nil) // sess.Commit() ran in the handler; sarama returns no error

	partitions := map[string][]int32{topic: {}}
	client, err := sarama.NewClient(addrs, conf())
	offsets := map[string]map[string]int64{"committed": {}, "end": {}}
	if err == nil {
		ids, perr := client.Partitions(topic)
		err = perr
		partitions[topic] = ids
		for _, p := range ids {
			end, oerr := client.GetOffset(topic, p, sarama.OffsetNewest)
			err = errors.Join(err, oerr)
			offsets["end"][fmt.Sprint(p)] = end
		}
		defer client.Close()
	}
	fetched, ferr := admin.ListConsumerGroupOffsets(group, partitions)
	err = errors.Join(err, ferr)
	if fetched != nil {
		for p, block := range fetched.Blocks[topic] {
			offsets["committed"][fmt.Sprint(p)] = block.Offset
			if block.Err != sarama.ErrNoError {
				err = errors.Join(err, block.Err)
			}
		}
	}
	emit("offsets", err, offsets)

	groups, err := admin.DescribeConsumerGroups([]string{group})
	result := map[string]any{}
	if err == nil && len(groups) == 1 {
		d := groups[0]
		if d.Err != sarama.ErrNoError {
			err = d.Err
		}
		result = map[string]any{"state": d.State, "members": len(d.Members),
			"protocol_type": d.ProtocolType, "protocol": d.Protocol}
	}
	emit("describe_group", err, result)
	stop()
	<-finished
	cg.Close()
}

// runLegacy: what a client pinned to an old protocol Version meets, step by step. The
// fetch step ends at a record, an error, or a line on stdin: a consumer whose fetches a
// broker refuses may retry them quietly forever, and only the caller knows when it has
// seen enough (the broker's log line, say).
func runLegacy(ctx context.Context, addrs []string, conf func() *sarama.Config, topic string) {
	admin, err := sarama.NewClusterAdmin(addrs, conf())
	if err == nil {
		err = admin.CreateTopic(topic+"-new", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false)
		admin.Close()
	}
	emit("create_topic", err, nil)

	client, err := sarama.NewClient(addrs, conf())
	if err != nil {
		emit("metadata", err, nil)
		return
	}
	defer client.Close()
	err = client.RefreshMetadata(topic)
	ids, perr := client.Partitions(topic)
	emit("metadata", errors.Join(err, perr), map[string]any{"partitions": len(ids)})

	producer, err := sarama.NewSyncProducerFromClient(client)
	if err == nil {
		_, _, err = producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Key: sarama.StringEncoder("legacy"), Value: sarama.StringEncoder("legacy"),
		})
	}
	emit("produce", err, nil)

	stdin := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		os.Stdin.Read(buf)
		close(stdin)
	}()
	consumer, err := sarama.NewConsumerFromClient(client)
	records := 0
	if err == nil {
		var pc sarama.PartitionConsumer
		pc, err = consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
		if err == nil {
			select {
			case <-pc.Messages():
				records++
			case e := <-pc.Errors():
				err = e
			case <-stdin:
			case <-ctx.Done():
				err = ctx.Err()
			}
			pc.AsyncClose()
		}
	}
	emit("fetch", err, map[string]any{"records": records})
}
