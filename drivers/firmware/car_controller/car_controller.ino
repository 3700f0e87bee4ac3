// car_controller.ino - RC car microcontroller firmware for robolearn (Arduino-compatible C++).
//
// Drives the steering servo and the ESC with 50 Hz servo PWM, counts wheel-encoder edges in an
// interrupt, reads an MPU-6050 IMU over I2C and the battery through a divider, and talks to the
// host over USB serial with the protocol in robolearn/drivers/car_protocol.py:
//
//   frame   = COBS(payload || crc16_le(payload)) 0x00
//   crc16   = CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF)
//   payload = type u8, then little-endian fields (layouts: see send_telemetry / handle_*).
//
// FAILSAFE (explicit): if no valid COMMAND frame arrived for timeout_ms, the ESC gets neutral
// (1500 us) and the steering is centred, and telemetry carries FLAG_FAILSAFE, until the next
// valid COMMAND. The failsafe is also active from power-up until the first command.
//
// Wiring (Arduino Nano / Uno pin numbers; change the PIN_ defines for another board):
//   D9  steering servo signal        D10 ESC signal (ESC BEC powers the servo)
//   D2  encoder channel A (INT0)     D4  encoder channel B (direction)
//   A4/A5 MPU-6050 SDA/SCL (3.3 V)   A0  battery divider (10k / 4.7k from the 2S pack)
// tests/test_car_driver.py parses this file and checks the constants and field layouts
// against car_protocol.py: change both together.

#include <Arduino.h>
#include <Servo.h>
#include <Wire.h>

// ------------------------------------------------------------------ protocol constants
#define MSG_COMMAND 0x01
#define MSG_TELEMETRY 0x02
#define MSG_CONFIG 0x03
#define FLAG_FAILSAFE 0x01
#define FLAG_CONFIGURED 0x02
#define COMMAND_SIZE 7
#define TELEMETRY_SIZE 34
#define CONFIG_SIZE 5
#define DEFAULT_TIMEOUT_MS 250
#define DEFAULT_TELEMETRY_PERIOD_MS 10
#define TICKS_PER_METRE 1000
#define THROTTLE_SCALE 1000
#define MAX_FRAME 64
#define CRC_POLY 0x1021
#define CRC_INIT 0xFFFF
#define SERIAL_BAUD 115200

// ------------------------------------------------------------------------- hardware
#define PIN_STEER 9
#define PIN_ESC 10
#define PIN_ENC_A 2
#define PIN_ENC_B 4
#define PIN_BATTERY A0
#define MPU_ADDR 0x68
#define NEUTRAL_US 1500
#define PULSE_SPAN_US 500          // +-500 us around neutral = full range
#define MAX_STEER_MRAD 450          // steering servo travel at +-PULSE_SPAN_US
#define BATTERY_MV_PER_COUNT 22     // 5 V ref, 1024 counts, divider (10k+4.7k)/4.7k ~ 3.13

Servo steer_servo;
Servo esc;

volatile int32_t enc_ticks = 0;
uint16_t tele_seq = 0;
uint16_t last_cmd_seq = 0;
int16_t cmd_steer_mrad = 0;
int16_t cmd_throttle = 0;
int16_t applied_steer_mrad = 0;
int16_t applied_throttle = 0;
uint32_t last_cmd_ms = 0;
bool have_command = false;
bool configured = false;
uint16_t timeout_ms = DEFAULT_TIMEOUT_MS;
uint16_t telemetry_period_ms = DEFAULT_TELEMETRY_PERIOD_MS;
uint32_t next_tele_ms = 0;
int32_t last_ticks = 0;
uint32_t last_speed_ms = 0;
int16_t speed_mm_s = 0;

uint8_t rx_buf[MAX_FRAME];
uint8_t rx_len = 0;
bool rx_overflow = false;

// ------------------------------------------------------------------------- encoder
void on_encoder() {
  // quadrature: B level at A's rising edge gives the direction
  if (digitalRead(PIN_ENC_B)) enc_ticks--; else enc_ticks++;
}

// ---------------------------------------------------------------------------- CRC
uint16_t crc16_ccitt(const uint8_t *data, uint8_t len) {
  uint16_t crc = CRC_INIT;
  for (uint8_t i = 0; i < len; i++) {
    crc ^= (uint16_t)data[i] << 8;
    for (uint8_t b = 0; b < 8; b++) {
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ CRC_POLY) : (uint16_t)(crc << 1);
    }
  }
  return crc;
}

// --------------------------------------------------------------------------- COBS
// Encodes len bytes of src into dst (room for len + len/254 + 1); returns encoded length.
uint8_t cobs_encode(const uint8_t *src, uint8_t len, uint8_t *dst) {
  uint8_t code_at = 0, code = 1, out = 1;
  for (uint8_t i = 0; i < len; i++) {
    if (src[i] == 0) {
      dst[code_at] = code; code_at = out++; code = 1;
    } else {
      dst[out++] = src[i]; code++;
      if (code == 0xFF) { dst[code_at] = code; code_at = out++; code = 1; }
    }
  }
  dst[code_at] = code;
  return out;
}

// Decodes in place-safe into dst; returns decoded length or -1 on a malformed frame.
int cobs_decode(const uint8_t *src, uint8_t len, uint8_t *dst) {
  uint8_t i = 0, out = 0;
  while (i < len) {
    uint8_t code = src[i];
    if (code == 0 || i + code > len) return -1;
    for (uint8_t k = 1; k < code; k++) {
      if (src[i + k] == 0) return -1;
      dst[out++] = src[i + k];
    }
    i += code;
    if (code != 0xFF && i < len) dst[out++] = 0;
  }
  return out;
}

// --------------------------------------------------------- little-endian field helpers
void put_u8(uint8_t *&p, uint8_t v) { *p++ = v; }
void put_u16(uint8_t *&p, uint16_t v) { *p++ = v & 0xFF; *p++ = v >> 8; }
void put_i16(uint8_t *&p, int16_t v) { put_u16(p, (uint16_t)v); }
void put_u32(uint8_t *&p, uint32_t v) { for (uint8_t k = 0; k < 4; k++) { *p++ = v & 0xFF; v >>= 8; } }
void put_i32(uint8_t *&p, int32_t v) { put_u32(p, (uint32_t)v); }
uint8_t get_u8(const uint8_t *&p) { return *p++; }
uint16_t get_u16(const uint8_t *&p) { uint16_t v = p[0] | ((uint16_t)p[1] << 8); p += 2; return v; }
int16_t get_i16(const uint8_t *&p) { return (int16_t)get_u16(p); }

void send_frame(const uint8_t *payload, uint8_t len) {
  uint8_t raw[MAX_FRAME];
  uint8_t enc[MAX_FRAME + 4];
  memcpy(raw, payload, len);
  uint16_t crc = crc16_ccitt(payload, len);
  raw[len] = crc & 0xFF;
  raw[len + 1] = crc >> 8;
  uint8_t n = cobs_encode(raw, len + 2, enc);
  enc[n++] = 0x00;
  Serial.write(enc, n);
}

// ------------------------------------------------------------------------------ IMU
int16_t imu_raw[7];   // ax ay az temp gx gy gz

void imu_begin() {
  Wire.begin();
  Wire.beginTransmission(MPU_ADDR); Wire.write(0x6B); Wire.write(0x00); Wire.endTransmission();  // wake
  Wire.beginTransmission(MPU_ADDR); Wire.write(0x1B); Wire.write(0x00); Wire.endTransmission();  // +-250 dps
  Wire.beginTransmission(MPU_ADDR); Wire.write(0x1C); Wire.write(0x00); Wire.endTransmission();  // +-2 g
}

void imu_read() {
  Wire.beginTransmission(MPU_ADDR);
  Wire.write(0x3B);
  Wire.endTransmission(false);
  Wire.requestFrom(MPU_ADDR, 14);
  for (uint8_t k = 0; k < 7 && Wire.available() >= 2; k++) {
    uint8_t hi = Wire.read();                    // two statements: operand order is unspecified
    uint8_t lo = Wire.read();
    imu_raw[k] = (int16_t)(((uint16_t)hi << 8) | lo);
  }
}

// 16384 LSB/g -> cm/s^2: * 981 / 16384 ; 131 LSB/(deg/s) -> mrad/s: * 1000*pi/180 / 131
int16_t accel_cm_s2(int16_t raw) { return (int16_t)((int32_t)raw * 981 / 16384); }
int16_t gyro_mrad_s(int16_t raw) { return (int16_t)((int32_t)raw * 17453 / 131000); }

// --------------------------------------------------------------------- actuators
void apply_outputs(int16_t steer_mrad, int16_t throttle) {
  steer_mrad = constrain(steer_mrad, -MAX_STEER_MRAD, MAX_STEER_MRAD);
  throttle = constrain(throttle, -THROTTLE_SCALE, THROTTLE_SCALE);
  applied_steer_mrad = steer_mrad;
  applied_throttle = throttle;
  steer_servo.writeMicroseconds(NEUTRAL_US + (int32_t)steer_mrad * PULSE_SPAN_US / MAX_STEER_MRAD);
  esc.writeMicroseconds(NEUTRAL_US + (int32_t)throttle * PULSE_SPAN_US / THROTTLE_SCALE);
}

bool failsafe_active(uint32_t now) {
  return !have_command || (uint32_t)(now - last_cmd_ms) > timeout_ms;
}

// ---------------------------------------------------------------------- messages
void handle_command(const uint8_t *p) {
  get_u8(p);                       // type
  last_cmd_seq = get_u16(p);       // seq
  cmd_steer_mrad = get_i16(p);     // steer_mrad
  cmd_throttle = get_i16(p);       // throttle_permille
  last_cmd_ms = millis();
  have_command = true;
}

void handle_config(const uint8_t *p) {
  get_u8(p);                       // type
  uint16_t t = get_u16(p);         // timeout_ms
  uint16_t period = get_u16(p);    // telemetry_period_ms
  timeout_ms = t > 0 ? t : 1;
  telemetry_period_ms = period > 0 ? period : 1;
  configured = true;
  uint8_t out[CONFIG_SIZE];
  uint8_t *q = out;
  put_u8(q, MSG_CONFIG);
  put_u16(q, timeout_ms);
  put_u16(q, telemetry_period_ms);
  send_frame(out, CONFIG_SIZE);    // echo = acknowledgement
}

void send_telemetry(uint32_t now, bool failsafe) {
  noInterrupts();
  int32_t ticks = enc_ticks;
  interrupts();
  uint32_t dt = now - last_speed_ms;
  if (dt >= 20) {                   // speed over >= 20 ms windows (encoder resolution)
    speed_mm_s = (int16_t)((int32_t)(ticks - last_ticks) * 1000L * 1000L / TICKS_PER_METRE / (int32_t)dt);
    last_ticks = ticks;
    last_speed_ms = now;
  }
  imu_read();
  uint16_t battery_mv = (uint16_t)analogRead(PIN_BATTERY) * BATTERY_MV_PER_COUNT;
  uint8_t flags = (failsafe ? FLAG_FAILSAFE : 0) | (configured ? FLAG_CONFIGURED : 0);

  uint8_t out[TELEMETRY_SIZE];
  uint8_t *q = out;
  put_u8(q, MSG_TELEMETRY);
  put_u16(q, ++tele_seq);                     // seq
  put_u16(q, last_cmd_seq);                   // cmd_seq
  put_u32(q, now);                            // t_ms
  put_i32(q, ticks);                          // enc_ticks
  put_i16(q, speed_mm_s);                     // speed_mm_s
  put_i16(q, accel_cm_s2(imu_raw[0]));        // accel x
  put_i16(q, accel_cm_s2(imu_raw[1]));        // accel y
  put_i16(q, accel_cm_s2(imu_raw[2]));        // accel z
  put_i16(q, gyro_mrad_s(imu_raw[4]));        // gyro x
  put_i16(q, gyro_mrad_s(imu_raw[5]));        // gyro y
  put_i16(q, gyro_mrad_s(imu_raw[6]));        // gyro z
  put_u16(q, battery_mv);                     // battery_mv
  put_i16(q, applied_steer_mrad);             // steer_mrad
  put_i16(q, applied_throttle);               // throttle_permille
  put_u8(q, flags);                           // flags
  send_frame(out, TELEMETRY_SIZE);
}

void on_frame(const uint8_t *frame, uint8_t len) {
  uint8_t raw[MAX_FRAME];
  int n = cobs_decode(frame, len, raw);
  if (n < 3) return;
  uint16_t crc = raw[n - 2] | ((uint16_t)raw[n - 1] << 8);
  if (crc16_ccitt(raw, n - 2) != crc) return;          // corrupted: drop, never act on it
  uint8_t type = raw[0];
  if (type == MSG_COMMAND && n - 2 == COMMAND_SIZE) handle_command(raw);
  else if (type == MSG_CONFIG && n - 2 == CONFIG_SIZE) handle_config(raw);
}

// ---------------------------------------------------------------------- main loop
void setup() {
  Serial.begin(SERIAL_BAUD);
  steer_servo.attach(PIN_STEER);
  esc.attach(PIN_ESC);
  apply_outputs(0, 0);                           // neutral before anything else
  pinMode(PIN_ENC_A, INPUT_PULLUP);
  pinMode(PIN_ENC_B, INPUT_PULLUP);
  attachInterrupt(digitalPinToInterrupt(PIN_ENC_A), on_encoder, RISING);
  imu_begin();
  next_tele_ms = millis();
}

void loop() {
  while (Serial.available() > 0) {
    uint8_t b = (uint8_t)Serial.read();
    if (b == 0x00) {                             // delimiter: a frame ends here
      if (!rx_overflow && rx_len > 0) on_frame(rx_buf, rx_len);
      rx_len = 0;
      rx_overflow = false;
    } else if (rx_len < MAX_FRAME) {
      rx_buf[rx_len++] = b;
    } else {
      rx_overflow = true;                        // garbage run: drop until the next 0x00
    }
  }
  uint32_t now = millis();
  bool failsafe = failsafe_active(now);
  if (failsafe) apply_outputs(0, 0);             // neutral throttle, straight wheels
  else apply_outputs(cmd_steer_mrad, cmd_throttle);
  if ((int32_t)(now - next_tele_ms) >= 0) {
    next_tele_ms += telemetry_period_ms;
    if ((int32_t)(now - next_tele_ms) > (int32_t)telemetry_period_ms) next_tele_ms = now;
    send_telemetry(now, failsafe);
  }
}
