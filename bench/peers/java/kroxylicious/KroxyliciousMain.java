/*
 * Runs Kroxylicious from its runtime jars with one configuration file, as the
 * distribution's main class does (the distribution itself, kroxylicious-app, is not on
 * the Maven Central this project reaches, and its build needs test artifacts that are
 * not either): parse the YAML with Kroxylicious's own ConfigParser, start KafkaProxy
 * with the default features, block until SIGTERM.
 *
 *   java -cp 'bench/peers/build/kroxylicious-0.12.0/*:bench/peers/build/kroxylicious' \
 *       KroxyliciousMain proxy.yaml
 *   <java 21+> -cp 'bench/peers/build/kroxylicious-0.23.0/*:bench/peers/build/kroxylicious-launcher-0.23.0' \
 *       KroxyliciousMain proxy.yaml
 *
 * Compiled against each installed version (bench/peers/install). Starting and stopping
 * changed between them (0.12.0: startup() returns the proxy and block() waits, shutdown()
 * returns the proxy; 0.23.0: startup() returns a future that completes when the proxy
 * stops, shutdown() a future), so those two calls go through reflection.
 */
import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Future;

public final class KroxyliciousMain {
    private KroxyliciousMain() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: KroxyliciousMain CONFIG.yaml");
            System.exit(2);
        }
        ConfigParser parser = new ConfigParser();
        Configuration config = parser.parseConfiguration(Files.readString(Path.of(args[0])));
        KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures());
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                Object stopped = KafkaProxy.class.getMethod("shutdown").invoke(proxy);
                if (stopped instanceof Future<?> future) {
                    future.get();
                }
            }
            catch (ReflectiveOperationException | java.util.concurrent.ExecutionException e) {
                throw new IllegalStateException(e);
            }
            catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "kroxylicious-shutdown"));
        Object started = KafkaProxy.class.getMethod("startup").invoke(proxy);
        if (started instanceof Future<?> future) {
            future.get();
        }
        else {
            KafkaProxy.class.getMethod("block").invoke(proxy);
        }
    }
}
