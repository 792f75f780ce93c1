/* The call gate (src/x86/gate.rs): assembled with `gcc -c docs/gate.S`, its .text copied into gate.rs byte for byte. */
    .text
    .globl gate
gate:
    pushfq
    push %rax
    push %rdi
    push %rsi
    push %rdx
    push %r10
    push %r8
    push %r9
    push %rcx
    push %r11
    mov 80(%rsp), %rax
    mov 88(%rsp), %rdi
    mov 96(%rsp), %rsi
    mov 104(%rsp), %rdx
    mov 112(%rsp), %r10
    mov 120(%rsp), %r8
    mov 128(%rsp), %r9
    syscall
after:
    mov $14, %eax
    mov $2, %edi
    lea 136(%rsp), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    pop %r11
    pop %rcx
    pop %r9
    pop %r8
    pop %r10
    pop %rdx
    pop %rsi
    pop %rdi
    pop %rax
    popfq
    lea 64(%rsp), %rsp
    ret $128
