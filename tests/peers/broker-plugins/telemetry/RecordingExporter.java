package telemetry;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;

/**
 * A KIP-714 client telemetry receiver for a test broker: every push the broker accepts is
 * written, as the broker hands it over, to one JSON line of the file named by the broker
 * property {@code kafkalens.telemetry.record.path}, so a test can compare what kafkalens
 * decoded with what the broker itself received.
 *
 * <p>A broker exposes GetTelemetrySubscriptions and PushTelemetry only when a metrics reporter
 * implements a receiver: {@code ClientTelemetryExporterProvider} from Kafka 4.2 on (its
 * predecessor {@code ClientTelemetry} is deprecated since 4.2; both 4.2 and 4.4 take either).
 * Add it with {@code metric.reporters=telemetry.RecordingExporter} and this class's directory on
 * the broker's classpath.
 *
 * <p>A line: {@code client_instance_id}, {@code client_id}, {@code terminating},
 * {@code content_type}, {@code push_interval_ms}, {@code principal}, {@code listener},
 * {@code client_address}, {@code data} (the OTLP MetricsData bytes, decompressed by the broker,
 * base64).
 */
public class RecordingExporter implements MetricsReporter, ClientTelemetryExporterProvider {
    public static final String PATH_CONFIG = "kafkalens.telemetry.record.path";

    private final ObjectMapper json = new ObjectMapper();
    private OutputStream out;

    @Override
    public void configure(Map<String, ?> configs) {
        Object path = configs.get(PATH_CONFIG);
        if (path == null) {
            throw new IllegalArgumentException(PATH_CONFIG + " is not set");
        }
        try {
            out = new FileOutputStream(path.toString(), true);
        } catch (IOException e) {
            throw new IllegalStateException("cannot open " + path, e);
        }
    }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::record;
    }

    private synchronized void record(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        AuthorizableRequestContext request = context.authorizableRequestContext();
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("client_instance_id", payload.clientInstanceId().toString());
        line.put("client_id", request.clientId());
        line.put("terminating", payload.isTerminating());
        line.put("content_type", payload.contentType());
        line.put("push_interval_ms", context.pushIntervalMs());
        line.put("principal", request.principal().toString());
        line.put("listener", request.listenerName());
        line.put("client_address", request.clientAddress().getHostAddress());
        line.put("data", Base64.getEncoder().encodeToString(bytes));
        try {
            out.write((json.writeValueAsString(line) + "\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            throw new IllegalStateException("cannot record a push", e);
        }
    }

    @Override
    public void init(List<KafkaMetric> metrics) {}

    @Override
    public void metricChange(KafkaMetric metric) {}

    @Override
    public void metricRemoval(KafkaMetric metric) {}

    @Override
    public Set<String> reconfigurableConfigs() {
        return Set.of();
    }

    @Override
    public void validateReconfiguration(Map<String, ?> configs) {}

    @Override
    public void reconfigure(Map<String, ?> configs) {}

    @Override
    public synchronized void close() {
        try {
            if (out != null) {
                out.close();
            }
        } catch (IOException e) {
            // closing: nothing is left to record
        }
    }
}
