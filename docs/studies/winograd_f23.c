// A design study for issue #13's demo target, not part of tiny and not a benchmark: a fused Winograd F(2 x 2, 3 x 3)
// convolution kernel for the demo's first 3 x 3 layer, (128, 32, 28, 28) by (32, 32, 3, 3), padding 1, on two threads,
// timed alone (best and median of 10) and checked against a double reference. Its input is the padded channels-last
// copy tiny's convolutions read ([N][30][30][C]); its output is channels-last. Per image and row of 14 tiles: the
// input transform into V (16 x 14 x 32 floats, 28 KiB), 16 products of 14 tiles by 32 channels by 32 outputs in 28
// vector accumulators (the weights' transform U, 16 x 32 x 32, precomputed), then the output transform. Session 45,
// a Sapphire Rapids-class Xeon: best 3.23-3.50 ms (max abs error 1.2e-6, values of about 1); tiny's direct kernel of
// the same layer took 5.34 ms at best in a separate run (TINY_DEBUG=2), not side by side with this one. With its
// loops over the tiles rolled, the accumulators spilled (8.4-8.9 ms).
//
// Build and run (AVX-512):
//   clang -O2 -march=native -ffp-contract=fast docs/studies/winograd_f23.c -o /tmp/w -lpthread -lm && /tmp/w
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define N 128
#define C 32
#define K 32
#define H 28
#define P 30
#define T 14
static float *X, *U, *Y, *W;
static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void row(int n, int ty, float* V /*[16][T][C]*/, float* M /*[16][T][K]*/) {
  // input transform: V[xi][tx][c]
  for (int tx = 0; tx < T; tx++)
    for (int cv = 0; cv < C; cv += 16) {
      __m512 d[4][4];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
          d[i][j] = _mm512_loadu_ps(X + (((size_t)n * P + 2 * ty + i) * P + 2 * tx + j) * C + cv);
      __m512 t[4][4]; // B^T d
      for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; i++) { // (B^T d) B
        __m512 v0 = _mm512_sub_ps(t[i][0], t[i][2]), v1 = _mm512_add_ps(t[i][1], t[i][2]);
        __m512 v2 = _mm512_sub_ps(t[i][2], t[i][1]), v3 = _mm512_sub_ps(t[i][1], t[i][3]);
        _mm512_storeu_ps(V + ((i * 4 + 0) * T + tx) * C + cv, v0);
        _mm512_storeu_ps(V + ((i * 4 + 1) * T + tx) * C + cv, v1);
        _mm512_storeu_ps(V + ((i * 4 + 2) * T + tx) * C + cv, v2);
        _mm512_storeu_ps(V + ((i * 4 + 3) * T + tx) * C + cv, v3);
      }
    }
  // 16 GEMMs: M[xi][tx][k] = sum_c V[xi][tx][c] U[xi][c][k]: 14 rows x 2 vectors
  for (int xi = 0; xi < 16; xi++) {
    __m512 acc[T][2];
#pragma clang loop unroll(full)
    for (int tx = 0; tx < T; tx++)
      acc[tx][0] = acc[tx][1] = _mm512_setzero_ps();
    const float* v = V + xi * T * C;
    const float* u = U + xi * C * K;
    for (int c = 0; c < C; c++) {
      __m512 u0 = _mm512_loadu_ps(u + c * K), u1 = _mm512_loadu_ps(u + c * K + 16);
#pragma clang loop unroll(full)
      for (int tx = 0; tx < T; tx++) {
        __m512 b = _mm512_set1_ps(v[tx * C + c]);
        acc[tx][0] = _mm512_fmadd_ps(b, u0, acc[tx][0]);
        acc[tx][1] = _mm512_fmadd_ps(b, u1, acc[tx][1]);
      }
    }
#pragma clang loop unroll(full)
    for (int tx = 0; tx < T; tx++) {
      _mm512_storeu_ps(M + (xi * T + tx) * K, acc[tx][0]);
      _mm512_storeu_ps(M + (xi * T + tx) * K + 16, acc[tx][1]);
    }
  }
  // output transform: Y = A^T M A, A^T = [[1,1,1,0],[0,1,-1,-1]]
  for (int tx = 0; tx < T; tx++)
    for (int kv = 0; kv < K; kv += 16) {
      __m512 m[4][4];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
          m[i][j] = _mm512_loadu_ps(M + ((i * 4 + j) * T + tx) * K + kv);
      __m512 s[2][4];
      for (int j = 0; j < 4; j++) {
        s[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
      }
      for (int i = 0; i < 2; i++) {
        __m512 y0 = _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]);
        __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
        _mm512_storeu_ps(Y + (((size_t)n * H + 2 * ty + i) * H + 2 * tx) * K + kv, y0);
        _mm512_storeu_ps(Y + (((size_t)n * H + 2 * ty + i) * H + 2 * tx + 1) * K + kv, y1);
      }
    }
}
static void* run(void* p) {
  int t = (int)(intptr_t)p;
  float* V = aligned_alloc(64, 16 * T * C * 4);
  float* M = aligned_alloc(64, 16 * T * K * 4);
  for (int n = t * N / 2; n < (t + 1) * N / 2; n++)
    for (int ty = 0; ty < T; ty++)
      row(n, ty, V, M);
  free(V);
  free(M);
  return 0;
}
int main() {
  X = aligned_alloc(64, (size_t)N * P * P * C * 4);
  Y = aligned_alloc(64, (size_t)N * H * H * K * 4);
  U = aligned_alloc(64, 16 * C * K * 4);
  W = malloc(K * C * 9 * 4);
  srand(1);
  memset(X, 0, (size_t)N * P * P * C * 4);
  for (int n = 0; n < N; n++)
    for (int y = 1; y <= H; y++)
      for (int x = 1; x <= H; x++)
        for (int c = 0; c < C; c++)
          X[(((size_t)n * P + y) * P + x) * C + c] = rand() / (float)RAND_MAX - 0.5f;
  for (int i = 0; i < K * C * 9; i++)
    W[i] = rand() / (float)RAND_MAX - 0.5f;
  // U = G g G^T, G = [[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]]
  const float G[4][3] = {{1, 0, 0}, {.5f, .5f, .5f}, {.5f, -.5f, .5f}, {0, 0, 1}};
  for (int k = 0; k < K; k++)
    for (int c = 0; c < C; c++) {
      float g[3][3];
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
          g[i][j] = W[((k * C + c) * 3 + i) * 3 + j];
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
          float s = 0;
          for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
              s += G[a][i] * g[i][j] * G[b][j];
          U[((a * 4 + b) * C + c) * K + k] = s;
        }
    }
  double times[10];
  for (int r = 0; r < 10; r++) {
    pthread_t th[2];
    double t0 = now();
    for (int i = 0; i < 2; i++)
      pthread_create(&th[i], 0, run, (void*)(intptr_t)i);
    for (int i = 0; i < 2; i++)
      pthread_join(th[i], 0);
    times[r] = now() - t0;
  }
  for (int i = 1; i < 10; i++) // insertion sort: best first
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      double t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  double maxerr = 0;
  for (int s = 0; s < 2000; s++) {
    int n = rand() % N, y = rand() % H, x = rand() % H, k = rand() % K;
    double ref = 0;
    for (int c = 0; c < C; c++)
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
          ref += (double)W[((k * C + c) * 3 + i) * 3 + j] * X[(((size_t)n * P + y + i) * P + x + j) * C + c];
    double e = fabs(Y[(((size_t)n * H + y) * H + x) * K + k] - ref);
    if (e > maxerr) maxerr = e;
  }
  printf("fused Winograd F(2x2, 3x3), two threads: best %.0f us, median %.0f us, max abs error %.2e\n", times[0] * 1e6,
         (times[4] + times[5]) / 2 * 1e6, maxerr);
}
