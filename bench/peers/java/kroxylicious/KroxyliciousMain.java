/*
 * Runs Kroxylicious from its runtime jars with one configuration file, as the
 * distribution's main class does (the distribution itself, kroxylicious-app, is not on
 * the Maven Central this project reaches): parse the YAML with Kroxylicious's own
 * ConfigParser, start KafkaProxy with the default features, block until SIGTERM.
 *
 *   java -cp 'bench/peers/build/kroxylicious-0.12.0/*:bench/peers/build/kroxylicious' \
 *       KroxyliciousMain proxy.yaml
 */
import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

import java.nio.file.Files;
import java.nio.file.Path;

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
        Runtime.getRuntime().addShutdownHook(new Thread(proxy::shutdown, "kroxylicious-shutdown"));
        proxy.startup();
        proxy.block();
    }
}
