package msgstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/**
 * One keep-alive HTTP/1.1 connection to one node (HTTPS when a CA file is set): a request is
 * written whole and its answer read straight into one (pooled) array of its Content-Length,
 * on the fetch thread. A fetch answer is megabytes and this reader asks for nothing else;
 * {@code java.net.http} gathers a body from buffers handed between its own threads and then
 * copies it (replaced together with the fetching ahead: 0.18-0.20 s to 0.14 s a scan).
 */
final class NodeConnection implements Closeable {
  static final String BATCH_TYPE = "application/x-msgstore-batch";
  private static final int MAX_HEADER_LINE = 16 * 1024;
  private static final Map<String, SSLContext> CONTEXTS = new ConcurrentHashMap<>();
  private static final ObjectMapper JSON = new ObjectMapper();

  final String address;
  private final NodeSettings settings;
  private final String host;
  private final int port;
  private final boolean tls;
  private Socket socket;
  private InputStream in;
  private OutputStream out;

  /**
   * A node's answer: status, media type and body (its first ``length`` bytes; a 200 answer's
   * array comes from {@link BufferPool}, to be given back when read).
   */
  record Answer(int status, String contentType, byte[] body, int length) {}

  NodeConnection(NodeSettings settings, String address) {
    URI uri = URI.create(address);
    if (uri.getHost() == null || !("http".equals(uri.getScheme()) || "https".equals(uri.getScheme()))) {
      throw new IllegalArgumentException(address + " is not a node URL like http://host:port");
    }
    this.settings = settings;
    this.address = address;
    this.host = uri.getHost();
    this.tls = "https".equals(uri.getScheme());
    this.port = uri.getPort() > 0 ? uri.getPort() : (tls ? 443 : 80);
    if (tls && settings.caFile == null) {
      throw new IllegalArgumentException(address + " is https but no CA file (option 'ca') was given");
    }
  }

  /** POST a JSON body; a connection the node closed while idle is opened again once. */
  Answer post(String path, String json) throws IOException {
    byte[] body = json.getBytes(StandardCharsets.UTF_8);
    boolean reused = socket != null;
    try {
      return exchange(path, body);
    } catch (IOException first) {
      close();
      if (!reused) {
        throw first;
      }
      return exchange(path, body);
    }
  }

  private Answer exchange(String path, byte[] body) throws IOException {
    if (socket == null) {
      open();
    }
    StringBuilder head = new StringBuilder(256)
        .append("POST ").append(path).append(" HTTP/1.1\r\n")
        .append("Host: ").append(host).append(':').append(port).append("\r\n")
        .append("Accept: ").append(BATCH_TYPE).append("\r\n")
        .append("Content-Type: application/json\r\n")
        .append("Content-Length: ").append(body.length).append("\r\n");
    if (settings.token != null) {
      head.append("Authorization: Bearer ").append(settings.token).append("\r\n");
    }
    head.append("\r\n");
    out.write(head.toString().getBytes(StandardCharsets.ISO_8859_1));
    out.write(body);
    out.flush();
    String status = line();
    String[] parts = status.split(" ", 3);
    if (parts.length < 2 || !parts[0].startsWith("HTTP/1.")) {
      throw new IOException("node " + address + " answered a malformed status line: " + status);
    }
    int code;
    try {
      code = Integer.parseInt(parts[1]);
    } catch (NumberFormatException e) {
      throw new IOException("node " + address + " answered a malformed status line: " + status, e);
    }
    long length = -1;
    boolean chunked = false;
    boolean closeAfter = parts[0].equals("HTTP/1.0");
    String type = "";
    for (String h = line(); !h.isEmpty(); h = line()) {
      int colon = h.indexOf(':');
      if (colon <= 0) {
        throw new IOException("node " + address + " answered a malformed header: " + h);
      }
      String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
      String value = h.substring(colon + 1).trim();
      switch (name) {
        case "content-length" -> length = Long.parseLong(value);
        case "content-type" -> type = value;
        case "transfer-encoding" -> chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
        case "connection" -> closeAfter |= value.equalsIgnoreCase("close");
        default -> { }
      }
    }
    byte[] content;
    if (chunked) {
      content = chunks();
      length = content.length;
    } else if (length >= 0) {
      if (length > Integer.MAX_VALUE - 8) {
        throw new IOException("node " + address + " answered " + length + " bytes, more than one array holds");
      }
      content = code == 200 ? BufferPool.take((int) length) : new byte[(int) length];
      if (in.readNBytes(content, 0, (int) length) != length) {
        throw new EOFException("node " + address + " closed the connection inside an answer");
      }
    } else {
      content = in.readAllBytes();
      length = content.length;
      closeAfter = true;
    }
    if (closeAfter) {
      close();
    }
    return new Answer(code, type, content, (int) length);
  }

  private byte[] chunks() throws IOException {
    java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
    while (true) {
      String size = line();
      int semi = size.indexOf(';');
      int n = Integer.parseInt((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
      if (n == 0) {
        while (!line().isEmpty()) {
          // trailers
        }
        return all.toByteArray();
      }
      byte[] chunk = in.readNBytes(n);
      if (chunk.length != n) {
        throw new EOFException("node " + address + " closed the connection inside a chunk");
      }
      all.write(chunk);
      line();
    }
  }

  private String line() throws IOException {
    StringBuilder s = new StringBuilder();
    while (true) {
      int c = in.read();
      if (c < 0) {
        throw new EOFException("node " + address + " closed the connection");
      }
      if (c == '\n') {
        int n = s.length();
        return n > 0 && s.charAt(n - 1) == '\r' ? s.substring(0, n - 1) : s.toString();
      }
      if (s.length() >= MAX_HEADER_LINE) {
        throw new IOException("node " + address + " answered a header line over " + MAX_HEADER_LINE + " bytes");
      }
      s.append((char) c);
    }
  }

  private void open() throws IOException {
    Socket raw = new Socket();
    try {
      raw.setTcpNoDelay(true);
      raw.setSoTimeout((int) Math.min(Integer.MAX_VALUE, settings.timeoutMs));
      raw.connect(new InetSocketAddress(host, port), (int) Math.min(10_000, settings.timeoutMs));
      Socket s = raw;
      if (tls) {
        SSLSocket ssl = (SSLSocket) CONTEXTS.computeIfAbsent(settings.caFile, NodeConnection::trusting)
            .getSocketFactory().createSocket(raw, host, port, true);
        SSLParameters params = ssl.getSSLParameters();
        params.setEndpointIdentificationAlgorithm("HTTPS"); // the certificate must name the host
        ssl.setSSLParameters(params);
        ssl.startHandshake();
        s = ssl;
      }
      socket = s;
      in = new BufferedInputStream(s.getInputStream(), 256 * 1024);
      out = new BufferedOutputStream(s.getOutputStream(), 8 * 1024);
    } catch (IOException | RuntimeException e) {
      raw.close();
      throw e;
    }
  }

  /** An SSL context that trusts exactly the certificates in the PEM file. */
  private static SSLContext trusting(String caFile) {
    try (InputStream pem = new FileInputStream(caFile)) {
      KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
      store.load(null, null);
      int i = 0;
      for (Certificate cert : CertificateFactory.getInstance("X.509").generateCertificates(pem)) {
        store.setCertificateEntry("msgstore-ca-" + i++, cert);
      }
      if (i == 0) {
        throw new IllegalArgumentException("CA file " + caFile + " holds no certificate");
      }
      TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      tmf.init(store);
      SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(null, tmf.getTrustManagers(), null);
      return ctx;
    } catch (IOException | GeneralSecurityException e) {
      throw new IllegalArgumentException("cannot use CA file " + caFile + ": " + e, e);
    }
  }

  @Override
  public void close() {
    if (socket != null) {
      try {
        socket.close();
      } catch (IOException ignored) {
        // closing: nothing left to read or write
      }
      socket = null;
    }
  }

  /** A certificate the CA does not vouch for (not retried, unlike a handshake cut short). */
  static boolean untrusted(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof java.security.cert.CertificateException
          || t instanceof java.security.cert.CertPathValidatorException) {
        return true;
      }
    }
    return false;
  }

  /** A node's error answer ({"error": {"code", "message", ...}}) as an exception. */
  static NodeError error(String address, Answer answer) {
    String code = "http_" + answer.status();
    String message = new String(answer.body(), 0, answer.length(), StandardCharsets.UTF_8);
    String owner = null;
    int partition = -1;
    try {
      JsonNode err = JSON.readTree(answer.body(), 0, answer.length()).path("error");
      if (err.isObject()) {
        code = err.path("code").asText(code);
        message = err.path("message").asText(message);
        owner = err.path("owner").isTextual() ? err.get("owner").asText() : null;
        partition = err.path("partition").asInt(-1);
      }
    } catch (IOException notJson) {
      // keep the raw body as the message
    }
    return new NodeError(address, answer.status(), code, message, owner, partition);
  }

  /** What a node answered instead of a page; {@link #retryable} tells a move or outage. */
  static final class NodeError extends IOException {
    private static final long serialVersionUID = 1L;
    final int status;
    final String code;
    final String owner;
    final int partition;

    NodeError(String address, int status, String code, String message, String owner, int partition) {
      super("msgstore node " + address + " answered " + status + " " + code + ": " + message);
      this.status = status;
      this.code = code;
      this.owner = owner;
      this.partition = partition;
    }

    boolean retryable() {
      return status == 421 || status == 502 || status == 503 || status == 504 || "fenced".equals(code);
    }
  }
}
